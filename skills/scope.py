"""Who may change what everyone reads: where a skill is shown, and where a change lands.

The rule: a change by someone who is not a skill reviewer never reaches other people's
prompts without review. So a skill has a scope (`skills.models.Scope`):

- **team**: indexed, listed and loadable in every chat. It changes at once only when a skill
  reviewer asks in their own private chat (SKILLS_APPROVAL="own_chat"); anyone else's change,
  and every change asked in a shared chat, waits for a skill reviewer.
- **personal**: owned by one Person (or by one Actor when no Person is linked: an unlinked
  Telegram account, a terminal login). The agent shows it only in chats whose one reader is
  that owner (`chats.selectors.chat_private_to`: their DM or terminal; never an integration's
  API conversation, whose token owner reads it); everywhere else it does not exist, not
  even by name in an error. On the dashboard only its owner and skill reviewers see it. Its
  owner's changes apply at once in those chats. A skill reviewer can promote it to the team
  (`reviews.skill_promote`).

A create asked in the author's own private chat makes a personal skill for a non-reviewer,
and a team skill for a skill reviewer (who could approve their own proposal anyway), unless
the call asks for the other scope; a non-reviewer asking for `team` makes a proposal. A create
asked in a shared chat is a proposal for a team skill. "review" makes every change a
proposal (creates are team proposals); "auto" applies everything at once, to the team: the
operator chose it explicitly, and docs/SECURITY.md says what it gives up.

Per-author limits (SKILLS_PERSONAL_MAX active personal skills per owner, SKILLS_PENDING_MAX
skill proposals waiting per author) are refused with a message the model can act on.
"""

from dataclasses import dataclass

from django.conf import settings
from django.db.models import Q

from chats.agent.registry import ORIGIN_REVIEW
from chats.models import Actor, Chat
from chats.selectors import chat_private_to
from chats.work_sources import bounding, drawn_from
from skills import policy
from skills.models import Scope, Skill, SkillProposal, Via

SCOPES = (Scope.TEAM, Scope.PERSONAL)
LIVE_STATUSES = (Skill.Status.ACTIVE, Skill.Status.STALE)


class ScopeRefused(Exception):
    """The change is refused by the scope rule or a limit; `code` is the Outcome code."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Owner:
    """The owner of personal skills: a Person, or an Actor no Person is linked to."""

    person: object = None
    actor: Actor | None = None

    def skills(self) -> Q:
        """Personal skills of this owner (an account later linked to the Person keeps its
        skills: they are the same human's)."""
        if self.person is not None:
            mine = Q(owner_person=self.person) | Q(owner_actor__person=self.person)
        else:
            mine = Q(owner_actor=self.actor)
        return Q(scope=Scope.PERSONAL) & mine

    def owns(self, skill: Skill) -> bool:
        if skill.scope != Scope.PERSONAL:
            return False
        if self.person is not None:
            if skill.owner_person_id is not None:
                return skill.owner_person_id == self.person.pk
            return skill.owner_actor is not None and skill.owner_actor.person_id == self.person.pk
        return skill.owner_actor_id is not None and skill.owner_actor_id == self.actor.pk

    def fields(self) -> dict:
        """The Skill fields of a new personal skill of this owner."""
        if self.person is not None:
            return {"scope": Scope.PERSONAL, "owner_person": self.person}
        return {"scope": Scope.PERSONAL, "owner_actor": self.actor}


def private_owner(chat: Chat | None, *, person=None, actor: Actor | None = None) -> Owner | None:
    """The author, when `chat` is their own private chat (its one reader); else None."""
    if not chat_private_to(chat, person=person, actor=actor):
        return None
    if person is None and actor is not None and actor.person_id is not None:
        person = actor.person
    return Owner(person=person) if person is not None else Owner(actor=actor)


TEAM_ONLY = Q(scope=Scope.TEAM)


def in_chat(chat: Chat | None, *, person=None, actor: Actor | None = None) -> Q:
    """The skills the agent may index, list and load in `chat` for this author: team skills,
    and the author's personal skills when `chat` is their own private chat."""
    owner = private_owner(chat, person=person, actor=actor)
    return TEAM_ONLY if owner is None else TEAM_ONLY | owner.skills()


def for_turn(context) -> Q:
    """`in_chat` for a turn's (or a slash command's) context: its chat, person and actor;
    team skills only without a context."""
    if context is None:
        return TEAM_ONLY
    return in_chat(context.chat, person=context.person, actor=context.actor)


def for_person(person) -> Q:
    """The skills `person` sees on the dashboard: team skills and their own personal ones;
    skill reviewers see every skill (they decide and promote)."""
    if policy.may_review(person):
        return Q()
    if person is None or not getattr(person, "is_authenticated", False):
        return TEAM_ONLY
    return TEAM_ONLY | Owner(person=person).skills()


@dataclass(frozen=True)
class Placement:
    """Where a change lands: applied now or proposed, and for a create, whose personal
    skill it becomes (None: a team skill)."""

    apply_now: bool
    personal: Owner | None = None


def _hidden(author, skill: Skill, action: str) -> ScopeRefused:
    """What a chat that may not see `skill` is told: the same as for a name nobody uses
    (or, for a create, that the name is taken), so nothing about it leaks."""
    if action == "create":
        return ScopeRefused(
            "conflict",
            f"Error: the name {skill.slug!r} is taken by a skill not shown here. Choose "
            "another name.",
        )
    return ScopeRefused(
        "not_found",
        f"Error: there is no skill named {skill.slug!r}. Call skills_list to see the names, "
        "or create it.",
    )


def _personal_limit(owner: Owner) -> None:
    limit = settings.SKILLS_PERSONAL_MAX
    count = Skill.objects.filter(owner.skills(), status__in=LIVE_STATUSES).count()
    if count >= limit:
        raise ScopeRefused(
            "invalid",
            f"Error: you have {count} personal skills, the most one person may have "
            f"({limit}). Nothing was stored. Improve one of them instead (skills_list shows "
            "them), archive one you no longer need with skill_manage(action='delete'), or ask "
            "a skill reviewer to promote one to the team.",
        )


def place(
    *,
    author,
    skill: Skill | None,
    action: str,
    apply_now: bool | None = None,
    asked_scope: str = "",
) -> Placement:
    """Decide where the change of `skill` (None: a new one) asked by `author` lands, under
    the skill's row lock. Raises ScopeRefused when the author's chat may not see the skill,
    a scope is asked where it cannot be had, or the personal skills limit is reached.
    `apply_now` given by the caller (imports, the curator's proposals) is kept as it is."""
    if asked_scope and asked_scope not in SCOPES:
        raise ScopeRefused("invalid", "Error: scope is 'personal' or 'team'.")
    agent = author.via == Via.AGENT
    owner = private_owner(author.chat, person=author.person, actor=author.actor) if agent else None
    seen = skill is None or skill.scope == Scope.TEAM or (owner is not None and owner.owns(skill))
    if agent and not seen:
        raise _hidden(author, skill, action)
    if agent and _draws_on_files(author, action):
        return _file_placement(author, owner, skill, asked_scope)
    if apply_now is not None:
        return Placement(apply_now)
    if author.origin == ORIGIN_REVIEW:
        return Placement(False)  # a background review only proposes, whatever the policy
    if author.via in (Via.COMMAND, Via.SYSTEM):
        return Placement(True)
    if not agent:
        return Placement(policy.may_review(author.person))
    approval = policy.approval_policy()
    if skill is not None and skill.scope == Scope.PERSONAL:
        return Placement(approval != "review")  # the owner's own skill, in their own chat
    if skill is None and asked_scope == Scope.PERSONAL:
        if owner is None:
            raise ScopeRefused(
                "invalid",
                "Error: a personal skill is created in its owner's own private chat (their "
                "DM or terminal), never in a shared chat. Here, create it without scope to "
                "propose it to the team, or ask the person to save it in their own chat.",
            )
        if approval != "own_chat":
            raise ScopeRefused(
                "invalid",
                f"Error: this hub makes no personal skills (SKILLS_APPROVAL={approval}). "
                "Create it without scope: it goes to the team"
                + (" at once." if approval == "auto" else " once a skill reviewer approves."),
            )
    if approval == "auto":
        return Placement(True)
    if approval == "review" or owner is None:
        return Placement(False)
    reviewer = policy.may_review(owner.person)
    if skill is None:
        wanted = asked_scope or (Scope.TEAM if reviewer else Scope.PERSONAL)
        if wanted == Scope.PERSONAL:
            _personal_limit(owner)
            return Placement(True, personal=owner)
    return Placement(reviewer)  # a team skill: at once only for a skill reviewer


# Changes that carry no new text: never refused for what they drew on.
TEXTLESS_ACTIONS = ("delete", "remove_file")


def _draws_on_files(author, action: str) -> bool:
    sources = getattr(author, "sources", ())
    return action not in TEXTLESS_ACTIONS and bool(bounding(sources))


def _file_placement(author, owner: Owner | None, skill: Skill | None, asked_scope: str):
    """Where a change drawn from files of this chat lands (issue 33): never where more people
    read it than the files' chat's readers. A team skill is indexed in every chat, so only a
    personal skill of the chat's one reader (its owner, in their own private chat) may take
    it; anything else is refused with a sentence the model can act on."""
    files = bounding(author.sources)  # files, and restricted knowledge collections
    chat_id = author.chat.pk if author.chat is not None else None
    own_files = owner is not None and {source.get("chat_id") for source in files} == {chat_id}
    approval = policy.approval_policy()
    if own_files and skill is not None and owner.owns(skill):
        review = author.origin == ORIGIN_REVIEW or approval == "review"
        return Placement(not review)
    if (
        own_files
        and skill is None
        and asked_scope != Scope.TEAM
        and author.origin != ORIGIN_REVIEW
        and approval == "own_chat"
    ):
        _personal_limit(owner)
        return Placement(True, personal=owner)
    if own_files and approval == "own_chat" and author.origin != ORIGIN_REVIEW:
        hint = "Create it as a personal skill (scope 'personal') instead."
    else:
        hint = (
            'Keep what matters in this chat\'s memory (scope "chat") instead; a person may '
            "make it a personal skill from their own private chat."
        )
    raise ScopeRefused(
        "invalid",
        f"Error: nothing was stored: this draws on {drawn_from(files)}, and a team skill "
        f"is indexed in every chat. {hint}",
    )


def check_pending_limit(author) -> None:
    """Refuse one more proposal from an author who already has SKILLS_PENDING_MAX waiting
    (the changes they asked for in chats; a background review's are bounded on their own)."""
    if author.origin == ORIGIN_REVIEW or author.via != Via.AGENT:
        return
    if author.person is not None:
        mine = Q(author_person=author.person)
    elif author.actor is not None:
        mine = Q(author_actor=author.actor)
    else:
        return
    limit = settings.SKILLS_PENDING_MAX
    waiting = SkillProposal.objects.filter(
        mine, status=SkillProposal.Status.PENDING, review__isnull=True
    ).count()
    if waiting >= limit:
        raise ScopeRefused(
            "invalid",
            f"Error: {waiting} skill changes you asked for already wait for a skill reviewer, "
            f"the most one person may have waiting ({limit}). Nothing was stored. Tell the "
            "user to wait until a reviewer decides them (or to ask one), then try again.",
        )


def describe(placement: Placement) -> str:
    """What the model should know about where an applied change landed ("" for the team)."""
    if placement.personal is None:
        return ""
    return (
        " It is a personal skill: indexed only in its owner's own private chats, never shown "
        "to anyone else; a skill reviewer can promote it to the team."
    )
