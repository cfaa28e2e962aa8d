"""The Celery app: the broker is REDIS_URL, configuration comes from Django settings.

Beat (`celery -A hermes_site beat`, or `worker -B` / `worker --beat-thread` for a single
worker) runs the periodic tasks below; its schedule state lives in
CELERY_BEAT_SCHEDULE_FILENAME (under var/).

`--beat-thread` (added here): beat as a thread of the worker's own process instead of the
process Celery forks for `-B`, for `make run`'s embedded layout (hermes_site/runner.py). A
worker with a threads pool also gets the pool-process signals (worker_process_init and
_shutdown) once for its own process, as a solo worker does, so what is set up per process
(tracing, the garbage collector's freeze) happens there too."""

import os

from celery import Celery, bootsteps, signals
from click import Option

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hermes_site.settings")

app = Celery("hermes_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


class BeatThread(bootsteps.StartStopStep):
    """`celery worker --beat-thread`: the embedded beat as a thread (celery.beat's threaded
    service), started and stopped with the worker."""

    label = "BeatThread"
    conditional = True

    def __init__(self, worker, beat_thread: bool = False, **kwargs):
        self.enabled = bool(beat_thread)
        super().__init__(worker, **kwargs)

    def create(self, worker):
        from celery.beat import EmbeddedService

        if worker.beat is not None:
            raise SystemExit("--beat-thread and -B both embed beat: use one of them")
        return EmbeddedService(
            worker.app,
            schedule_filename=worker.schedule_filename,
            scheduler_cls=worker.scheduler,
            thread=True,
        )


app.user_options["worker"].add(
    Option(
        ("--beat-thread",),
        is_flag=True,
        default=False,
        help="Run beat as a thread of this worker's process (instead of -B's child process).",
    )
)
app.steps["worker"].add(BeatThread)


def _threads_pool(worker) -> bool:
    pool = getattr(worker, "pool_cls", None)
    module = pool if isinstance(pool, str) else getattr(pool, "__module__", "")
    return str(module).endswith(("thread", "threads"))


@signals.worker_init.connect
def _threads_pool_process_init(sender=None, **kwargs) -> None:
    if sender is not None and _threads_pool(sender):
        signals.worker_process_init.send(sender=None)


@signals.worker_shutdown.connect
def _threads_pool_process_shutdown(sender=None, **kwargs) -> None:
    if sender is not None and _threads_pool(sender):
        signals.worker_process_shutdown.send(sender=None, pid=os.getpid(), exitcode=0)


def periodic_tasks() -> list[tuple[str, str, float]]:
    """(name, task, seconds between runs) of each task beat runs, from the settings: the
    turn sweep, the skills curator unless LEARNING_CURATOR_INTERVAL_HOURS is 0 (the router
    sends it to the reviews' queue), the expiry of tool calls waiting for a decider, and the
    hourly expiry of memory and skill proposals."""
    from django.conf import settings

    tasks = [("sweep-turns", "chats.tasks.sweep_turns", settings.TURN_SWEEP_SECONDS)]
    if settings.LEARNING_CURATOR_INTERVAL_HOURS > 0:
        every = settings.LEARNING_CURATOR_INTERVAL_HOURS * 3600
        tasks.append(("curate-skills", "learning.tasks.run_curator", every))
    # Tool calls waiting for a decider past TOOLSERVERS_APPROVAL_TIMEOUT_SECONDS are denied.
    tasks.append(
        (
            "expire-tool-approvals",
            "toolservers.tasks.expire_approvals",
            settings.TOOLSERVERS_APPROVAL_SWEEP_SECONDS,
        )
    )
    # Proposals nobody decided in time (TTLs are days: an hour late is on time).
    tasks.append(("expire-memory-proposals", "memory.tasks.expire_proposals", 3600))
    tasks.append(("expire-skill-proposals", "skills.tasks.expire_proposals", 3600))
    # Schedules: claim due slots, start runs whose chat is free, write the heartbeat.
    tasks.append(
        ("dispatch-schedules", "schedules.tasks.dispatch", settings.SCHEDULES_DISPATCH_SECONDS)
    )
    # Attachments: blobs no attachment uses any more (a chat or message deleted).
    tasks.append(
        (
            "sweep-attachment-blobs",
            "attachments.tasks.sweep_blobs",
            settings.ATTACHMENTS_SWEEP_SECONDS,
        )
    )
    # Knowledge: re-sync every collection that has a folder (docs/KNOWLEDGE.md#sync).
    if settings.KNOWLEDGE_SYNC_SECONDS:
        tasks.append(
            ("resync-knowledge", "knowledge.tasks.resync_all", settings.KNOWLEDGE_SYNC_SECONDS)
        )
    return tasks


def minute_tasks() -> list[tuple[str, str]]:
    """(name, task) of each task beat also sends at second 0 of every minute: the schedules'
    dispatcher, so a cron slot (always on a minute) is seen at once rather than up to
    SCHEDULES_DISPATCH_SECONDS later, at whatever phase the periodic entry has. Passes at
    once are safe: each slot is claimed and started once."""
    return [("dispatch-schedules-on-the-minute", "schedules.tasks.dispatch")]


@app.on_after_configure.connect
def _schedule(sender: Celery, **kwargs) -> None:
    from celery.schedules import crontab
    from django.conf import settings

    for name, task, every in periodic_tasks():
        # Runs that piled up while no worker ran expire instead of running in a burst.
        sender.add_periodic_task(every, sender.signature(task), name=name, expires=every)
    for name, task in minute_tasks():
        expires = settings.SCHEDULES_DISPATCH_SECONDS
        sender.add_periodic_task(crontab(), sender.signature(task), name=name, expires=expires)
