"""The figures of the whole hub, read from the database and Redis at scrape time, so any one
host reports them right (they are shared state, not per process)."""

import logging
from collections.abc import Iterator

from django.conf import settings
from django.db.models import Count
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from bots.models import OutboundMessage
from chats.models import Turn
from hermes_site.redis import get_redis
from learning.models import Review
from schedules.models import ScheduleRun
from toolservers.models import ToolApproval, ToolCall

logger = logging.getLogger(__name__)

# kombu's Redis transport keeps a queue's messages of each priority step in its own list:
# the queue's name, then name + "\x06\x16" + step for the steps after 0.
PRIORITY_STEPS = (0, 3, 6, 9)


def _by(model, field: str, choices, **filters) -> dict[str, int]:
    """Rows of `model` per value of `field`, every choice present (zero when none)."""
    counts = dict.fromkeys((value for value, _ in choices), 0)
    for row in model.objects.filter(**filters).values(field).annotate(n=Count("id")):
        counts[row[field]] = row["n"]
    return counts


def celery_queues() -> list[str]:
    """The Celery queues this installation uses: turns, the background reviews, the
    schedules' dispatcher and the files' processing."""
    prefix = settings.REDIS_KEY_PREFIX
    return [prefix, f"{prefix}-reviews", f"{prefix}-schedules", f"{prefix}-files"]


def celery_queue_lengths() -> dict[str, int]:
    """Messages waiting in each Celery queue (every priority step counted)."""
    client = get_redis()
    lengths = {}
    for queue in celery_queues():
        keys = [queue if step == 0 else f"{queue}\x06\x16{step}" for step in PRIORITY_STEPS]
        pipe = client.pipeline(transaction=False)
        for key in keys:
            pipe.llen(key)
        lengths[queue] = sum(pipe.execute())
    return lengths


class HubCollector(Collector):
    """Turns, reviews, tool calls and scheduled runs by status, queue depth, the Telegram
    outbox backlog and the tool calls waiting for a decision. A source that fails is reported
    in hermes_hub_scrape_errors instead of failing the scrape."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        failed = []
        for source, families in (("database", self._database), ("redis", self._redis)):
            try:
                yield from families()
            except Exception:  # noqa: BLE001 - the other figures still count
                logger.warning("metrics: reading %s failed", source, exc_info=True)
                failed.append(source)
        errors = GaugeMetricFamily(
            "hermes_hub_scrape_errors",
            "1 when the hub-wide figures from this source could not be read at this scrape.",
            labels=["source"],
        )
        for source in ("database", "redis"):
            errors.add_metric([source], 1 if source in failed else 0)
        yield errors

    def _database(self) -> Iterator[GaugeMetricFamily]:
        tables = (
            ("hermes_hub_turns", "Turns in the hub by status.", Turn, "status", {}),
            (
                "hermes_hub_reviews",
                "Background reviews (learning loop) by status.",
                Review,
                "status",
                {},
            ),
            (
                "hermes_hub_tool_calls",
                "Tool-server calls recorded, by decision.",
                ToolCall,
                "decision",
                {},
            ),
            ("hermes_hub_schedule_runs", "Scheduled runs by status.", ScheduleRun, "status", {}),
            (
                "hermes_hub_telegram_outbox",
                "Telegram messages not yet sent (the outbox backlog), by status.",
                OutboundMessage,
                "status",
                {"status__in": OutboundMessage.OPEN},
            ),
        )
        families = []
        for name, help_text, model, field, filters in tables:
            choices = model._meta.get_field(field).choices
            if filters:
                choices = [(v, label) for v, label in choices if v in filters["status__in"]]
            family = GaugeMetricFamily(name, help_text, labels=[field])
            for value, count in _by(model, field, choices, **filters).items():
                family.add_metric([value], count)
            families.append(family)
        waiting = ToolApproval.objects.filter(status=ToolApproval.Status.PENDING).count()
        families.append(
            GaugeMetricFamily(
                "hermes_hub_approvals_waiting",
                "Tool calls waiting for a decider's approval.",
                value=waiting,
            )
        )
        yield from families  # only once every query succeeded: no half-read scrape

    def _redis(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "hermes_hub_celery_queue_length",
            "Tasks waiting in each Celery queue in Redis (turns not yet picked up by a worker).",
            labels=["queue"],
        )
        for queue, length in celery_queue_lengths().items():
            family.add_metric([queue], length)
        yield family
