"""The Celery app: the broker is REDIS_URL, configuration comes from Django settings.

Beat (`celery -A hermes_site beat`, or `worker -B` for a single worker) runs the periodic
tasks below; its schedule state lives in CELERY_BEAT_SCHEDULE_FILENAME (under var/)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hermes_site.settings")

app = Celery("hermes_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def _schedule(sender: Celery, **kwargs) -> None:
    from django.conf import settings

    every = settings.TURN_SWEEP_SECONDS
    # Sweeps that piled up while no worker ran expire instead of running in a burst.
    sender.add_periodic_task(
        every, sender.signature("chats.tasks.sweep_turns"), name="sweep-turns", expires=every
    )
