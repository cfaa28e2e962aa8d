"""Isolated runs: the turn of a schedule in mode `isolated` sees a fresh context holding only
this schedule's earlier runs (their prompts and the turns' replies and tool steps), not the
chat's conversation, its summary or its other messages. Its own prompt and reply are still
stored in the chat like any run's, so members see them; the next isolated run finds them.

Registered with the engine as a history scope provider (`chats.agent.registry`), so `chats`
never imports `schedules`.
"""

from chats.agent.registry import HistoryScope, TurnContext
from chats.models import Message
from schedules.models import Schedule, ScheduleRun
from schedules.services import ACTOR_NAMESPACE

PREVIOUS_RUNS = 20  # earlier runs offered at most (the history budget may keep fewer)


def isolated_history(context: TurnContext) -> HistoryScope | None:
    """The history of a turn whose trigger is an isolated schedule's run, else None.

    The run is found by the trigger's metadata and must name this very message as its
    trigger (the dispatcher stores both in one transaction), so no other message can ask
    for a narrowed history."""
    metadata = context.trigger.metadata
    run_id = metadata.get("schedule_run") if isinstance(metadata, dict) else None
    if not isinstance(run_id, int):
        return None  # not a scheduled run: no query at all
    run = (
        ScheduleRun.objects.filter(pk=run_id, trigger_id=context.trigger.pk)
        .select_related("schedule")
        .first()
    )
    if run is None:
        return _deleted_isolated(context, metadata)
    if run.schedule.mode != Schedule.Mode.ISOLATED:
        return None
    earlier = list(
        ScheduleRun.objects.filter(schedule_id=run.schedule_id, trigger_id__lt=context.trigger.pk)
        .exclude(pk=run.pk)
        .order_by("-trigger_id")
        .values_list("trigger_id", "turn_id")[:PREVIOUS_RUNS]
    )
    ids = {trigger_id for trigger_id, _ in earlier}
    turns = [turn_id for _, turn_id in earlier if turn_id is not None]
    if turns:
        ids.update(
            Message.objects.filter(
                chat_id=context.chat.pk,
                id__gt=min(ids),
                role__in=(Message.Role.ASSISTANT, Message.Role.TOOL),
                metadata__turn__in=turns,
            ).values_list("id", flat=True)
        )
    return HistoryScope(frozenset(ids), reason=f"isolated schedule #{run.schedule_id}")


def _deleted_isolated(context: TurnContext, metadata: dict) -> HistoryScope | None:
    """A run of an isolated schedule deleted after the run started (its records went with
    it, its turn still runs): no chat history either. Only the schedule's own actor's
    message counts, with the mode the dispatcher wrote into its metadata."""
    actor, schedule_id = context.actor, metadata.get("schedule")
    if metadata.get("mode") != Schedule.Mode.ISOLATED or actor is None:
        return None
    if actor.namespace != ACTOR_NAMESPACE or actor.external_id != str(schedule_id):
        return None
    return HistoryScope(frozenset(), reason=f"isolated schedule #{schedule_id} (deleted)")
