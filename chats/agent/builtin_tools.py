"""Tools every chat has: `session_search` over history and `current_time`."""

from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.utils import timezone

from chats.agent.registry import Tool, ToolError, TurnContext

SEARCH_LIMIT_MAX = 20


def _current_time(context: TurnContext, arguments: dict) -> dict:
    name = arguments.get("timezone") or "UTC"
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(
            f"unknown time zone {name!r}; use an IANA name like Europe/Berlin"
        ) from exc
    now = datetime.now(zone)
    return {
        "timezone": name,
        "iso": now.isoformat(timespec="seconds"),
        "weekday": now.strftime("%A"),
    }


def _session_search(context: TurnContext, arguments: dict) -> dict:
    """Search what the asking person may read; in a shared chat, only that chat."""
    from chats.search import SearchQueryError, chat_message_search, message_search
    from chats.selectors import chat_private_to

    limit = min(int(arguments.get("limit") or 8), SEARCH_LIMIT_MAX)
    # Beyond this chat only where the asker is its one reader: a DM or `/v1` conversation
    # with a member added shows its results to that member too.
    only_this_chat = not chat_private_to(context.chat, person=context.person)
    try:
        if only_this_chat:
            hits = chat_message_search(chat=context.chat, query=arguments["query"], limit=limit + 1)
        else:
            hits = message_search(person=context.person, query=arguments["query"], limit=limit + 1)
    except SearchQueryError as exc:
        raise ToolError(f"search query not understood: {exc}") from exc
    results = []
    for hit in hits:
        if hit.message.pk == context.trigger.pk:
            continue  # the question itself is not an answer
        message = hit.message
        author = message.actor.display_name if message.actor else message.role
        result = {
            "chat": message.chat.title or message.chat.chat_key,
            "author": author,
            "role": message.role,
            "when": timezone.localtime(message.created_at).isoformat(timespec="minutes"),
            "snippet": hit.snippet,
        }
        if hit.matched_in is not None:
            # The snippet is from a file on the message (text it holds), not its own text.
            result[f"found_in_{hit.matched_in.noun}"] = {
                "id": hit.matched_in.id,
                "name": hit.matched_in.name,
            }
        results.append(result)
    scope = "this chat" if only_this_chat else "the chats you can read"
    return {"scope": scope, "results": results[:limit], "count": len(results[:limit])}


CURRENT_TIME = Tool(
    name="current_time",
    description="The current date and time, optionally in a given IANA time zone.",
    parameters={
        "type": "object",
        "properties": {
            "timezone": {"type": "string", "description": "IANA time zone, e.g. Asia/Shanghai"}
        },
        "additionalProperties": False,
    },
    handler=_current_time,
    timeout_seconds=5,
)

SESSION_SEARCH = Tool(
    name="session_search",
    description=(
        "Full-text search of earlier messages (English and Chinese, substring match). "
        'Syntax: words (all must match), "exact phrase", a OR b, -word or NOT word, '
        "prefix*, and filters from:NAME, in:CHAT, channel:telegram|web|terminal|api, "
        "after:YYYY-MM-DD, before:YYYY-MM-DD, has:file|image|document, type:pdf|png|docx|…. "
        "In a group chat it searches that chat only; in a private chat, every chat the "
        "person talking to you may read. Words also match text inside files on messages "
        "(found_in_file then names the file). Returns author, time and a snippet per match."
    ),
    parameters={
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 1, "maxLength": 200},
            "limit": {"type": "integer", "minimum": 1, "maximum": SEARCH_LIMIT_MAX},
        },
        "required": ["query"],
        "additionalProperties": False,
    },
    handler=_session_search,
    timeout_seconds=10,
)


class BuiltinTools:
    """The chats app's tool provider."""

    def tools(self):
        return [CURRENT_TIME, SESSION_SEARCH]


builtin_tools = BuiltinTools()
