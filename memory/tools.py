"""The `memory` tool: the agent proposes add / replace / remove in a scope it chooses."""

from chats.agent.registry import ORIGIN_REVIEW, Tool, TurnContext
from chats.models import Actor
from chats.work_sources import work_sources
from memory import policy
from memory.audience import chat_audience
from memory.models import Scope, Visibility
from memory.selectors import chat_participants
from memory.services import Author, memory_book, memory_propose

DESCRIPTION = (
    "Long-term memory that outlives this conversation. Store short declarative facts "
    "(preferences, environment facts, conventions, decisions), never instructions to "
    "yourself, secrets or commands. Scopes: `user` = one person's preferences and style "
    "(the author of the current message; in a group set `about` only when the fact is "
    "about another participant), `chat` = facts about this chat, group or topic, `team` = "
    "facts everyone on the team relies on. People approve writes, except a private fact "
    "a person explicitly asked you to remember about themselves in their own chat, in their "
    "words; the result says which. In a shared chat only shared entries exist for you. "
    "`replace` and `remove` pick the entry by `old_text`, a unique part of its text. When a "
    "scope is full the error lists its entries: consolidate with replace/remove and retry "
    "in the same turn. Approved memory appears in your instructions from the next message on."
)

PARAMETERS = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": ["add", "replace", "remove"]},
        "scope": {"type": "string", "enum": ["user", "chat", "team"]},
        "content": {
            "type": "string",
            "maxLength": 4000,
            "description": "The fact (add) or the new text of the entry (replace).",
        },
        "old_text": {
            "type": "string",
            "maxLength": 4000,
            "description": "A unique part of the entry to replace or remove.",
        },
        "about": {
            "type": "string",
            "maxLength": 255,
            "description": "user scope only: the participant the fact is about, by name, "
            "when it is not the author of the current message.",
        },
        "visibility": {
            "type": "string",
            "enum": ["private", "shared"],
            "description": "user scope only: private facts appear only in that person's own "
            "chats, shared ones also in groups (always reviewed by the person first). "
            "Default: where it was said.",
        },
    },
    "required": ["action", "scope"],
    "additionalProperties": False,
}


class _Refused(Exception):
    pass


def _names(actor: Actor) -> set[str]:
    names = {actor.display_name.casefold(), actor.external_id.casefold()}
    if actor.person is not None:
        names.add(actor.person.get_username().casefold())
        full = actor.person.get_full_name().strip()
        if full:
            names.add(full.casefold())
            names.add(full.split()[0].casefold())
    return names


def _subject(context: TurnContext, about: str) -> tuple[object, Actor | None]:
    """The (person, actor) a user-scope fact is about: the author unless `about` names
    another participant of this chat."""
    if not about.strip():
        if context.origin == ORIGIN_REVIEW:
            # A review reads many people's messages: the fact names whom it is about.
            raise _Refused(
                "Error: name the person this fact is about in `about` (as in the brackets); "
                "nothing stored."
            )
        if context.actor is None and context.person is None:
            raise _Refused("Error: this message has no known author, so there is no user memory.")
        return context.person, context.actor
    wanted = about.strip().lstrip("@").casefold()
    participants = chat_participants(context.chat)
    found = [actor for actor in participants if wanted in _names(actor)]
    subjects = {(actor.person_id and f"p{actor.person_id}") or f"a{actor.pk}" for actor in found}
    if not found:
        listed = ", ".join(sorted({actor.display_name for actor in participants})) or "nobody"
        raise _Refused(
            f"Error: nobody in this chat is called {about!r}; nothing stored. "
            f"Participants: {listed}."
        )
    if len(subjects) > 1:
        listed = ", ".join(f"{actor.display_name} ({actor.channel})" for actor in found)
        raise _Refused(f"Error: {about!r} could be several people ({listed}); be more specific.")
    actor = found[0]
    return actor.person, actor


def _memory(context: TurnContext, arguments: dict) -> str:
    scope = arguments["scope"]
    change = arguments["action"]
    content = arguments.get("content") or ""
    visibility = ""
    audience = chat_audience(context.chat, person=context.person, actor=context.actor)
    names: set[str] = set()
    try:
        if scope == Scope.USER:
            person, actor = _subject(context, arguments.get("about") or "")
            book = memory_book(scope=scope, person=person, actor=actor)
            visibility = arguments.get("visibility") or (
                Visibility.SHARED if audience.shared else Visibility.PRIVATE
            )
            names = _names(actor) if actor is not None else set()
            if person is not None:
                names |= {person.get_username(), person.get_full_name()}
        else:
            if arguments.get("about") or arguments.get("visibility"):
                raise _Refused("Error: `about` and `visibility` apply to user scope only.")
            if scope == Scope.CHAT and not audience.shared:
                # A private chat's facts are its one reader's: kept in their (private) user
                # memory, never in a chat book that staff review.
                raise _Refused(
                    "Error: this is a private chat; store facts about this person with scope "
                    "`user`, and facts for everyone with scope `team`. Nothing stored."
                )
            book = memory_book(scope=scope, chat=context.chat)
    except _Refused as refused:
        return str(refused)
    outcome = memory_propose(
        book=book,
        change=change,
        author=Author(
            actor=context.actor,
            person=context.person,
            chat=context.chat,
            message=context.trigger,
            # A review's writes are never a person's own request: they always wait.
            asked=context.origin != ORIGIN_REVIEW
            and policy.explicit_request(change, context.trigger.text, content=content, names=names),
            origin=context.origin,
            review_id=context.review_id,
            sources=tuple(work_sources(context)),
        ),
        content=content,
        match=arguments.get("old_text") or "",
        visibility=visibility,
        audience=audience,
    )
    return outcome.message


MEMORY_TOOL = Tool(
    name="memory",
    description=DESCRIPTION,
    parameters=PARAMETERS,
    handler=_memory,
    timeout_seconds=15,
)


class MemoryTools:
    """The memory app's tool provider."""

    def tools(self):
        return [MEMORY_TOOL]


memory_tools = MemoryTools()
