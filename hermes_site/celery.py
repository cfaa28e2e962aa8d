"""The Celery app: the broker is REDIS_URL, configuration comes from Django settings.

Beat (`celery -A hermes_site beat`, or `worker -B` for a single worker) runs the periodic
tasks below; its schedule state lives in CELERY_BEAT_SCHEDULE_FILENAME (under var/)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hermes_site.settings")

app = Celery("hermes_site")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


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
