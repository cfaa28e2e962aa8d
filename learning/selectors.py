"""Reads of the learning loop's records. What a person sees is limited to the chats they
may read (`chats.selectors.chats_readable_by`); nothing here crosses that line.

A Review row says what ran and what it concluded; the proposals it made are reached through
`review.memory_entries` and `review.skill_proposals`, and their text must be shown through
the memory and skills rules (a pending fact is for its reviewers' eyes), not from here.
"""

from dataclasses import dataclass

from django.db.models import Count, Prefetch, QuerySet
from django.utils import timezone

from chats.models import Chat, ChatMember
from chats.selectors import chats_readable_by
from learning.models import ChatLearning, Review


def _readable_reviews(chat: Chat, person) -> QuerySet[Review]:
    """The reviews of `chat`, newest first, with their turn; empty unless `person` may read
    the chat."""
    if not chats_readable_by(person).filter(pk=chat.pk).exists():
        return Review.objects.none()
    return Review.objects.filter(chat=chat).select_related("turn").order_by("-created_at", "-id")


def reviews_for_chat(chat: Chat, person) -> QuerySet[Review]:
    """The reviews of `chat`, newest first, with their turn and how many memory and skill
    proposals each made (`memory_proposal_count`, `skill_proposal_count`); empty unless
    `person` may read the chat."""
    return _readable_reviews(chat, person).annotate(
        memory_proposal_count=Count("memory_entries", distinct=True),
        skill_proposal_count=Count("skill_proposals", distinct=True),
    )


def review_for_person(person, review_id: int) -> Review | None:
    """One review of a chat `person` may read, with its chat and turn, else None (404)."""
    return (
        Review.objects.select_related("chat", "turn")
        .filter(pk=review_id, chat__in=chats_readable_by(person))
        .first()
    )


def chat_learning_for_person(person, chat: Chat) -> ChatLearning | None:
    """The counters and settings of `chat` (unsaved defaults before its first turn), or None
    when `person` may not read the chat."""
    if not chats_readable_by(person).filter(pk=chat.pk).exists():
        return None
    return ChatLearning.objects.filter(chat=chat).first() or ChatLearning(chat=chat)


def review_for_memory_entry(entry) -> Review | None:
    """The review that proposed the change waiting on (or last decided for) a memory entry,
    with its turn: "proposed by the review after turn N". None when a turn proposed it."""
    if entry.review_id is None:
        return None
    return Review.objects.select_related("turn").filter(pk=entry.review_id).first()


def review_for_skill_proposal(proposal) -> Review | None:
    """The review that made a skill proposal, with its turn, or None."""
    if proposal.review_id is None:
        return None
    return Review.objects.select_related("turn").filter(pk=proposal.review_id).first()


def review_origin_label(review: Review | None) -> str:
    """How a proposal names its origin: "proposed by the review after turn 12", or ""."""
    if review is None:
        return ""
    return review.origin_label


def chat_learning_may_change(person, chat: Chat) -> bool:
    """May `person` change the chat's review intervals and quiet notice? Its active owners and
    admins, and active staff; nobody else (anonymous and deactivated people never)."""
    if person is None or not person.is_authenticated or not person.is_active:
        return False
    if person.is_staff or person.is_superuser:
        return True
    managers = (ChatMember.Role.OWNER, ChatMember.Role.ADMIN)
    return ChatMember.objects.filter(chat=chat, person=person, role__in=managers).exists()


def reviews_with_proposals_for_chat(chat: Chat, person) -> QuerySet[Review]:
    """The reviews of `chat` (as `reviews_for_chat`, without the counts: the lists are here)
    with each review's memory entries (book and subject) and skill proposals (skill)
    prefetched: a page of reviews costs the same queries at any length. The entries' text is
    for `memory_proposals_shown` to give out, not for the caller."""
    from memory.models import MemoryEntry
    from skills.models import SkillProposal

    entries = MemoryEntry.objects.select_related(
        "book__chat", "book__person", "book__actor"
    ).order_by("id")
    proposals = SkillProposal.objects.select_related("skill").order_by("id")
    return _readable_reviews(chat, person).prefetch_related(
        Prefetch("memory_entries", queryset=entries),
        Prefetch("skill_proposals", queryset=proposals),
    )


@dataclass(frozen=True)
class ShownMemoryProposal:
    """A memory entry a review proposed, as one chat reader may see it."""

    entry: object  # memory.models.MemoryEntry, with its book
    state: str  # proposed, approved, rejected, expired, removed (a CSS label too)
    label: str  # what waits or what became of it, in words
    text: str | None  # None: not this person's to read
    proposed_text: str | None  # the new text of a replacement waiting, when theirs to read
    waiting: bool  # a change still waits for a decision
    may_decide: bool  # …and this person may decide it (on the Approvals page)


def memory_proposals_shown(entries, *, chat: Chat, person) -> list[ShownMemoryProposal]:
    """Memory entries proposed by reviews of `chat` (a reader of which `person` must be) with
    the text only where memory's rules let the person read it: a change waiting only for
    those who may decide it (`memory_reviewable`) and the person it is about, an approved
    entry where the chat's readers see it (`entry_shown`) or to the person it is about;
    rejected, expired and removed entries never. At most three queries for any number."""
    from memory.audience import chat_audience, entry_shown
    from memory.models import MemoryEntry
    from memory.selectors import memory_entry_ids_about, memory_reviewable

    entries = list(entries)
    if not entries:
        return []
    Status = MemoryEntry.Status
    ids = [entry.pk for entry in entries]
    decidable = set(memory_reviewable(person).filter(pk__in=ids).values_list("pk", flat=True))
    about_them = memory_entry_ids_about(person=person, ids=ids)
    audience = chat_audience(chat, person=person)
    now = timezone.now()
    shown: list[ShownMemoryProposal] = []
    for entry in entries:
        expired = bool(entry.pending_change) and (
            entry.proposal_expires_at is not None and entry.proposal_expires_at <= now
        )
        waiting = bool(entry.pending_change) and not expired
        may_decide = waiting and entry.pk in decidable
        own = entry.pk in about_them
        readable = (
            may_decide or own or (entry.status == Status.ACTIVE and entry_shown(audience, entry))
        )
        if expired or entry.status == Status.EXPIRED:
            state, label = "expired", "expired undecided"
        elif entry.pending_change == "add":
            state, label = "proposed", "proposed"
        elif entry.pending_change == "replace":
            state, label = "proposed", "change proposed"
        elif entry.pending_change == "remove":
            state, label = "proposed", "removal proposed"
        else:
            state, label = entry.status, entry.get_status_display().lower()
        if entry.status == Status.ACTIVE and not entry.pending_change:
            state = "approved"
        shown.append(
            ShownMemoryProposal(
                entry=entry,
                state=state,
                label=label,
                text=entry.text if readable and not expired else None,
                proposed_text=(
                    entry.proposed_text
                    if waiting and entry.pending_change == "replace" and (may_decide or own)
                    else None
                ),
                waiting=waiting,
                may_decide=may_decide,
            )
        )
    return shown


def skill_proposals_decidable_by(person) -> bool:
    """May `person` decide skill proposals (a skill reviewer)? Then a waiting one links to
    the Approvals page."""
    from skills.policy import may_review

    return may_review(person)


# --- a review's tool calls and outcome, through the rules of what they proposed -------------

# Tools that only read skills (every person may read them): their steps propose nothing.
READ_ONLY_TOOLS = ("skills_list", "skill_view")


@dataclass(frozen=True)
class ShownStep:
    """One tool call of a review as one reader may see it: `shown` False leaves out its
    arguments and result (they may hold a proposal's text this person may not read)."""

    tool: str
    arguments: object
    result: str
    is_error: bool
    refused: bool
    shown: bool


@dataclass(frozen=True)
class ShownReview:
    """A review's steps and whether its outcome (which may quote what it proposed) is shown."""

    steps: list[ShownStep]
    outcome_shown: bool


def _memory_readable(item: ShownMemoryProposal) -> bool:
    """May the reader see all a memory proposal carries (a waiting replacement's new text
    too)? Decided by `memory_proposals_shown`, memory's own rule."""
    if item.text is None:
        return False
    waiting_text = item.waiting and item.entry.pending_change == "replace"
    return not waiting_text or item.proposed_text is not None


def _step_links(step: dict, review: Review) -> tuple[list[int], list[int]]:
    """(memory entry ids, skill proposal ids) a step made. A step recorded before steps named
    them is linked to everything its review proposed."""
    if "memory_entries" in step or "skill_proposals" in step:

        def ids(key):
            value = step.get(key)
            return [pk for pk in value if isinstance(pk, int)] if isinstance(value, list) else []

        return ids("memory_entries"), ids("skill_proposals")
    return (
        [entry.pk for entry in review.memory_entries.all()],
        [proposal.pk for proposal in review.skill_proposals.all()],
    )


def review_steps_shown(
    reviews, *, chat: Chat, person, memory: list[ShownMemoryProposal]
) -> dict[int, ShownReview]:
    """Per review of `chat` (from `reviews_with_proposals_for_chat`): its tool calls, each
    with arguments and result only where `person` may read every proposal that call made —
    memory's rule for a fact (`memory_proposals_shown`, whose output for the reviews' own
    entries is `memory`), skills' rule for a skill change (`unreviewed_text_readable`; an
    approved one became a version everyone reads). A call that proposed nothing (refused,
    blocked, an error: its text may be what was refused) shows its tool only; a call that
    only read skills shows all. The outcome, which may quote the proposals, only where every
    proposal the review made is readable.
    A page of reviews costs the same few queries at any length."""
    from memory.models import MemoryEntry
    from skills.models import SkillProposal
    from skills.policy import may_review
    from skills.selectors import readable_chat_ids, unreviewed_text_readable

    reviews = list(reviews)
    steps_of = {
        review.pk: [
            (step, _step_links(step, review))
            for step in (review.steps if isinstance(review.steps, list) else [])
            if isinstance(step, dict)
        ]
        for review in reviews
    }
    # What each review made, its own links and its steps' together: the outcome's rule, and
    # (all reviews together) what the readability checks below must fetch.
    made_of: dict[int, tuple[set[int], set[int]]] = {}
    for review in reviews:
        entries_made = {entry.pk for entry in review.memory_entries.all()}
        proposals_made = {proposal.pk for proposal in review.skill_proposals.all()}
        for _, (entries, proposals) in steps_of[review.pk]:
            entries_made.update(entries)
            proposals_made.update(proposals)
        made_of[review.pk] = (entries_made, proposals_made)
    entry_ids = set().union(*(entries for entries, _ in made_of.values()))
    proposal_ids = set().union(*(proposals for _, proposals in made_of.values()))
    memory_shown = {item.entry.pk: item for item in memory}
    missing = entry_ids - set(memory_shown)
    if missing:  # entries a step made that a later review has since taken over
        extra = MemoryEntry.objects.select_related("book__chat", "book__person", "book__actor")
        for item in memory_proposals_shown(
            extra.filter(pk__in=missing).order_by("id"), chat=chat, person=person
        ):
            memory_shown[item.entry.pk] = item
    skill_rows = {}
    if proposal_ids:
        skill_rows = {
            row[0]: row
            for row in SkillProposal.objects.filter(pk__in=proposal_ids).values_list(
                "pk", "status", "author_person_id", "source_chat_id"
            )
        }
    readable = readable_chat_ids(person, (row[3] for row in skill_rows.values()))
    reviewer = bool(skill_rows) and may_review(person)
    person_id = getattr(person, "pk", None)

    def memory_ok(pk: int) -> bool:
        item = memory_shown.get(pk)
        return item is not None and _memory_readable(item)

    def skill_ok(pk: int) -> bool:
        row = skill_rows.get(pk)
        if row is None:
            return False
        if row[1] == SkillProposal.Status.APPROVED:
            return True
        return unreviewed_text_readable(
            reviewer=reviewer,
            person_id=person_id,
            writer_id=row[2],
            chat_id=row[3],
            readable=readable,
        )

    shown: dict[int, ShownReview] = {}
    for review in reviews:
        steps = []
        for step, (entries, proposals) in steps_of[review.pk]:
            tool = str(step.get("tool") or "?")
            refused = bool(step.get("refused"))
            if tool in READ_ONLY_TOOLS and not refused:
                visible = True
            else:
                visible = bool(entries or proposals) and (
                    all(memory_ok(pk) for pk in entries) and all(skill_ok(pk) for pk in proposals)
                )
            steps.append(
                ShownStep(
                    tool=tool,
                    arguments=step.get("arguments", "") if visible else None,
                    result=str(step.get("result") or "") if visible else "",
                    is_error=bool(step.get("is_error")),
                    refused=refused,
                    shown=visible,
                )
            )
        entries_made, proposals_made = made_of[review.pk]
        outcome_shown = all(memory_ok(pk) for pk in entries_made) and all(
            skill_ok(pk) for pk in proposals_made
        )
        shown[review.pk] = ShownReview(steps=steps, outcome_shown=outcome_shown)
    return shown
