"""The nudge engine: per-chat counters advanced after each completed turn, and the trigger
that queues a background review when a counter reaches its interval.

Two counters, two granularities (seed 002): memory learns from what people say, so its
counter counts user turns; skills learn from tool use, so theirs counts tool-loop
iterations (model calls that asked for tools). The model's own use of the `memory` tool or
of `skill_manage` in a turn resets the matching counter: it just did that work itself.
Counters live in the database (`ChatLearning`), updated under a row lock, so they are
exact across workers and restarts. Reviews are queued after commit on their own Celery
queue; a turn never waits for one.
"""

import logging
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from chats.models import Chat, Message, Turn
from learning.models import ChatLearning, Review

logger = logging.getLogger(__name__)

MEMORY_TOOL = "memory"
SKILL_WRITE_TOOL = "skill_manage"
ENQUEUE_FAILED = "The review could not be queued (is Redis up?); the counters start again."


@dataclass(frozen=True)
class TurnActivity:
    """What a turn's tool loop did: its tool-calling iterations and the tools it called."""

    tool_iterations: int
    tool_names: frozenset[str]


def turn_activity(turn: Turn) -> TurnActivity:
    """Read from the turn's stored steps: every assistant step with tool calls is one
    iteration of the loop (the final reply, without tool calls, is not)."""
    steps = Message.objects.filter(
        chat_id=turn.chat_id,
        id__gt=turn.trigger_id,
        role=Message.Role.ASSISTANT,
        metadata__turn=turn.pk,
    ).values_list("parts", flat=True)
    iterations = 0
    names: set[str] = set()
    for parts in steps:
        calls = [
            part
            for part in parts or ()
            if isinstance(part, dict) and part.get("type") == "tool_call"
        ]
        if calls:
            iterations += 1
            names.update(str(call.get("name") or "") for call in calls)
    return TurnActivity(iterations, frozenset(names))


def _locked_learning(chat_id: int) -> ChatLearning:
    """The chat's counters under a row lock, created on first use (once, even in a race)."""
    learning = ChatLearning.objects.select_for_update().filter(chat_id=chat_id).first()
    if learning is not None:
        return learning
    try:
        with transaction.atomic():
            return ChatLearning.objects.create(chat_id=chat_id)
    except IntegrityError:
        return ChatLearning.objects.select_for_update().get(chat_id=chat_id)


def chat_learning(chat: Chat) -> ChatLearning:
    """The chat's counters and settings; an unsaved default row before its first turn."""
    return ChatLearning.objects.filter(chat=chat).first() or ChatLearning(chat=chat)


def learning_turn_finished(*, turn: Turn, status: str) -> Review | None:
    """Count a finished turn and queue a review when a counter reaches its interval.

    Only completed turns count (failed and interrupted ones do not): one user turn, plus the
    turn's tool-loop iterations. A turn that called `memory` resets the memory counter, one
    that called `skill_manage` the skill counter. A counter that reaches its interval (> 0)
    is reset and one review is queued after commit, with the focus memory, skills, or
    combined when both crossed; an area that already has a queued review in this chat joins
    it instead (it now reads on to this turn), so a chat never has two queued reviews of one
    area. Returns the review queued or joined, or None."""
    if status != Turn.Status.COMPLETED:
        return None
    activity = turn_activity(turn)
    with transaction.atomic():
        learning = _locked_learning(turn.chat_id)
        user_turns = learning.user_turns_since_memory_review + 1
        iterations = learning.iterations_since_skill_review + activity.tool_iterations
        if MEMORY_TOOL in activity.tool_names:
            user_turns = 0
        if SKILL_WRITE_TOOL in activity.tool_names:
            iterations = 0
        memory_interval = learning.effective_memory_interval
        skill_interval = learning.effective_skill_interval
        memory_due = memory_interval > 0 and user_turns >= memory_interval
        skills_due = skill_interval > 0 and iterations >= skill_interval
        trigger = {
            "user_turns": user_turns,
            "memory_interval": memory_interval,
            "tool_iterations": iterations,
            "skill_interval": skill_interval,
            "turn_tool_iterations": activity.tool_iterations,
        }
        ChatLearning.objects.filter(pk=learning.pk).update(
            user_turns_since_memory_review=0 if memory_due else user_turns,
            iterations_since_skill_review=0 if skills_due else iterations,
            updated_at=timezone.now(),
        )
        if not (memory_due or skills_due):
            return None
        due = [
            area
            for area, crossed in (
                (Review.Focus.MEMORY, memory_due),
                (Review.Focus.SKILLS, skills_due),
            )
            if crossed
        ]
        turn_number = Turn.objects.filter(chat_id=turn.chat_id, id__lte=turn.pk).count()
        covers_to = turn.reply_id or _last_message_id(turn.chat_id)
        # At most one queued review per chat and area: a crossing while one waits extends
        # that one to this turn (it has read nothing yet, so it reads these turns too), and
        # the reviews' queue holds at most one entry per chat and area, served in order.
        waiting = list(
            Review.objects.filter(chat_id=turn.chat_id, status=Review.Status.QUEUED).order_by("id")
        )
        joined: Review | None = None
        extended: set[int] = set()
        remaining = []
        for area in due:
            target = next((r for r in waiting if area in FOCUS_AREAS[r.focus]), None)
            if target is not None and (
                target.pk in extended or _extend(target, turn, turn_number, covers_to)
            ):
                extended.add(target.pk)
                joined = joined or target
            else:
                remaining.append(area)
        if not remaining:
            return joined
        focus = Review.Focus.COMBINED if len(remaining) == 2 else remaining[0]
        review = Review.objects.create(
            chat_id=turn.chat_id,
            turn=turn,
            turn_number=turn_number,
            focus=focus,
            trigger=trigger,
            covers_after_id=_previous_end(turn.chat_id, focus),
            covers_to_id=covers_to,
        )
        transaction.on_commit(lambda: _enqueue(review.pk))
    return review


def _extend(review: Review, turn: Turn, turn_number: int, covers_to: int | None) -> bool:
    """Let a still-queued review read on to `turn` (it will run after it) instead of queueing
    a second one; False when a worker claimed it meanwhile (it read what it had)."""
    trigger = dict(review.trigger or {})
    trigger["coalesced"] = int(trigger.get("coalesced") or 0) + 1
    fields = {"turn": turn, "turn_number": turn_number, "trigger": trigger}
    if covers_to is not None:
        fields["covers_to_id"] = covers_to
    return bool(Review.objects.filter(pk=review.pk, status=Review.Status.QUEUED).update(**fields))


FOCUS_AREAS = {
    Review.Focus.MEMORY: (Review.Focus.MEMORY,),
    Review.Focus.SKILLS: (Review.Focus.SKILLS,),
    Review.Focus.COMBINED: (Review.Focus.MEMORY, Review.Focus.SKILLS),
}


def _previous_end(chat_id: int, focus: str) -> int | None:
    """Where this review starts reading: after the last message that earlier reviews of the
    same area read. A skills review cannot save a fact, so it never hides the turns it read
    from the next memory review (and the other way round); a combined review starts where
    the area reviewed longest ago stopped. A failed or skipped review read nothing for anyone:
    the next one that runs reads its turns too."""
    ends = []
    for area in FOCUS_AREAS[focus]:
        end = (
            Review.objects.filter(chat_id=chat_id, focus__in=(area, Review.Focus.COMBINED))
            .exclude(status__in=(Review.Status.FAILED, Review.Status.SKIPPED))
            .aggregate(end=Max("covers_to_id"))["end"]
        )
        if end is None:
            return None
        ends.append(end)
    return min(ends)


def _last_message_id(chat_id: int) -> int | None:
    return Message.objects.filter(chat_id=chat_id).aggregate(last=Max("id"))["last"]


def _enqueue(review_id: int) -> None:
    from learning.tasks import run_review

    try:
        run_review.delay(review_id)
    except Exception:  # noqa: BLE001 - the chat goes on; the review is recorded as failed
        logger.error("could not enqueue review %s (is Redis up?)", review_id, exc_info=True)
        Review.objects.filter(pk=review_id, status=Review.Status.QUEUED).update(
            status=Review.Status.FAILED, error=ENQUEUE_FAILED, finished_at=timezone.now()
        )


def chat_learning_update(
    *,
    chat: Chat,
    memory_interval: int | None,
    skill_interval: int | None,
    review_notice: bool,
) -> ChatLearning:
    """Set a chat's own review intervals (None: the site default, 0: off) and its quiet
    notice; the counters are kept."""
    for value in (memory_interval, skill_interval):
        if value is not None and value < 0:
            raise ValueError("an interval is a number of turns or iterations, 0 or more")
    with transaction.atomic():
        learning = _locked_learning(chat.pk)
        learning.memory_interval = memory_interval
        learning.skill_interval = skill_interval
        learning.review_notice = review_notice
        learning.updated_at = timezone.now()
        learning.save(
            update_fields=["memory_interval", "skill_interval", "review_notice", "updated_at"]
        )
    return learning


# An interval past this is a typo, not a plan (and must fit the column on every database).
MAX_INTERVAL = 100_000


class ChatLearningNotAllowed(PermissionError):
    """The person may not change this chat's learning settings; nothing was written."""


class IntervalTooShort(ValueError):
    """An interval under LEARNING_MIN_INTERVAL from someone who is not staff; `field` names
    it. Nothing was written."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _check_minimum(field: str, value: int | None, current: int | None) -> None:
    """Refuse an interval from 1 to under the minimum (0, off, is fine), unless it is the one
    the chat already has (staff set it: saving the form again keeps it)."""
    minimum = settings.LEARNING_MIN_INTERVAL
    if value is not None and 0 < value < minimum and value != current:
        raise IntervalTooShort(
            field,
            f"Enter {minimum} or more (0 turns these reviews off): reviews share one queue, "
            "so only staff set a shorter interval for a chat.",
        )


def chat_learning_settings_update(
    *,
    chat: Chat,
    person,
    memory_interval: int | None,
    skill_interval: int | None,
    review_notice: bool,
) -> ChatLearning:
    """`chat_learning_update` for a person: only the chat's owners and admins and active staff
    (anyone else: ChatLearningNotAllowed, nothing written); intervals 0 to MAX_INTERVAL or
    None, and from LEARNING_MIN_INTERVAL up unless the person is staff or keeps the chat's
    current value (IntervalTooShort, nothing written). Written under the row lock, the
    counters kept, and what changed is recorded in the row's admin history (who, before →
    after) in the same transaction."""
    from django.contrib.admin.models import CHANGE, LogEntry

    from learning.selectors import chat_learning_may_change

    if not chat_learning_may_change(person, chat):
        raise ChatLearningNotAllowed("Only the chat's owners and admins change its learning.")
    for value in (memory_interval, skill_interval):
        if value is not None and value > MAX_INTERVAL:
            raise ValueError(f"an interval is at most {MAX_INTERVAL}")
    with transaction.atomic():
        before = _locked_learning(chat.pk)
        if not (person.is_staff or person.is_superuser):
            _check_minimum("memory_interval", memory_interval, before.memory_interval)
            _check_minimum("skill_interval", skill_interval, before.skill_interval)
        old = _settings_words(before)
        learning = chat_learning_update(
            chat=chat,
            memory_interval=memory_interval,
            skill_interval=skill_interval,
            review_notice=review_notice,
        )
        new = _settings_words(learning)
        changed = [f"{name}: {old[name]} → {new[name]}" for name in old if old[name] != new[name]]
        if changed:
            LogEntry.objects.log_actions(
                user_id=person.pk,
                queryset=[learning],
                action_flag=CHANGE,
                change_message="On the chat's learning page: " + "; ".join(changed) + ".",
                single_object=True,
            )
    return learning


def _settings_words(learning: ChatLearning) -> dict[str, str]:
    def interval(value: int | None) -> str:
        return "site default" if value is None else ("off" if value == 0 else str(value))

    return {
        "memory interval": interval(learning.memory_interval),
        "skill interval": interval(learning.skill_interval),
        "quiet notice": "on" if learning.review_notice else "off",
    }
