"""The turn runner (`chats.agent.runner`) `chats.apps` installs: queued turns go to the Celery
workers' `chats.tasks.run_turn`. The task module (and the engine and model client it loads) is
imported at the first enqueue, not at start-up: a web process that never enqueues stays light."""

from collections.abc import Sequence


class CeleryTurnRunner:
    """Hands queued turns to the Celery workers (`run_turn`)."""

    def enqueue(self, turn_id: int) -> None:
        from chats.tasks import run_turn

        run_turn.delay(turn_id)

    def enqueue_many(self, turn_ids: Sequence[int]) -> None:
        from chats.tasks import run_turn
        from hermes_site.celery import app

        # One broker connection for the whole batch, its messages sent in pipelined round
        # trips (kombu's publish batch; on a broker without one, one at a time).
        with app.producer_or_acquire() as producer, producer.batch(max_size=500):
            for turn_id in turn_ids:
                run_turn.apply_async((turn_id,), producer=producer)
