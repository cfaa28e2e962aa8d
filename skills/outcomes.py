"""What the skills services take and answer: who asks for a change (Author), what it did
(Outcome), and the exceptions people's actions raise. Kept apart from `skills.services` so
that module holds only the writes."""

from dataclasses import dataclass, field

from chats.agent.registry import ORIGIN_CHAT
from chats.models import Actor, Chat, Turn
from skills.models import Skill, SkillProposal, SkillVersion, Via
from skills.scan import Draft


class SkillNotAllowed(PermissionError):
    """The person may not do this to skills (not a skill reviewer)."""


class SkillConflict(Exception):
    """The skill or proposal is not in the state the caller saw; nothing changed."""


class SkillStale(SkillConflict):
    """The skill changed after the version the caller saw; nothing changed."""


class SkillInvalid(ValueError):
    """The change was refused (format, scanner); nothing changed but an audit event."""


@dataclass(frozen=True)
class Author:
    """Who asks for a change, and where: the turn in an agent write, a person elsewhere."""

    actor: Actor | None = None
    person: object = None
    chat: Chat | None = None
    turn: Turn | None = None
    via: str = Via.AGENT
    reason: str = ""
    origin: str = ORIGIN_CHAT  # ORIGIN_REVIEW: a background review, whose changes always wait
    review_id: int | None = None  # that review (linked from the proposal)
    # Files the change drew on (chats.work_sources): they bound where it may land.
    sources: tuple = ()


@dataclass
class Outcome:
    """What a change did, in words the model can act on."""

    code: str  # applied, proposed, unchanged, blocked, invalid, not_found, conflict
    message: str
    skill: Skill | None = None
    version: SkillVersion | None = None
    proposal: SkillProposal | None = None
    findings: list = field(default_factory=list)

    @property
    def stored(self) -> bool:
        return self.code in ("applied", "proposed")


class Refused(Exception):
    """A change refused before anything was stored; `code` is the Outcome's."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


class Moved(Exception):
    """The skill changed between preparing a draft and locking it: prepare again."""


def state_refusal(
    slug: str,
    action: str,
    skill: Skill | None,
    current: SkillVersion | None,
    base_version: int | None,
) -> Refused | None:
    """Why `action` cannot apply to the skill as it stands, or None."""
    if action in ("create", "import") and skill is None:
        return None
    if action == "create":
        return Refused(
            "conflict",
            f"Error: a skill named {slug!r} already exists (version "
            f"{current.number if current else 0}, {skill.status}). View it and patch "
            "or edit it, or choose another name.",
        )
    if skill is None:
        return Refused(
            "not_found",
            f"Error: there is no skill named {slug!r}. Call skills_list to see the "
            "names, or create it.",
        )
    if skill.status == Skill.Status.ARCHIVED and action not in ("rollback", "import"):
        return Refused(
            "invalid",
            f"Error: {slug} is archived; a skill reviewer can restore it before it changes again.",
        )
    if base_version is not None and current is not None and base_version != current.number:
        return Refused(
            "conflict",
            f"Error: {slug} changed since version {base_version}: it is at version "
            f"{current.number} now. View it again and redo your change on the current "
            "text.",
        )
    return None


def describe_applied(skill: Skill, version: SkillVersion | None, action: str, draft: Draft) -> str:
    """What an applied change did, for the model (the next message sees it in the index)."""
    if draft.archive:
        return (
            f"Archived {skill.slug}: it left the skills index; a skill reviewer can restore it. "
            "Its versions are kept."
        )
    matched = draft.detail.get("match")
    how = f", matched {matched}" if matched and matched != "exact" else ""
    return (
        f"Applied: {skill.slug} is now version {version.number} ({action}{how}). The skills "
        "index shows it from the next message on."
    )
