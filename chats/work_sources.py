"""Work sources: what a piece of the agent's work drew on besides the text of messages (the
files on the message it answered, the files it read in that turn). `chats` knows no file:
apps that keep such things register a provider in `AppConfig.ready()` (attachments: its
files), and the apps that store the agent's work with its provenance (memory and skill
proposals) ask `work_sources(context)` and keep what it returns beside the source message.

A source is a plain dict, stored as JSON: `{"kind": "file", "id": 7, "name": "runbook.pdf",
"chat_id": 3, "how": "attached" | "read", "url": "/attachments/7/download"}`. Its `chat_id`
says whose readers may read it: work drawn from it must never reach a wider audience than
that chat's readers (memory and skills each enforce it where a change would land), and a
page showing a source links to it only for those readers.
"""

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from chats.agent.registry import TurnContext

# (the turn's or review's context) -> the sources of what it may write now.
WorkSourceProvider = Callable[["TurnContext"], list[dict]]

_providers: dict[str, WorkSourceProvider] = {}


def register_work_sources(name: str, provider: WorkSourceProvider) -> None:
    """Add (or replace, by name) a provider of work sources."""
    _providers[name] = provider


def unregister_work_sources(name: str) -> None:
    _providers.pop(name, None)


def work_sources(context: "TurnContext") -> list[dict]:
    """Every registered provider's sources for this context, in registration order. A
    provider that fails fails the write that asked (the tool's error says nothing was
    stored): work whose sources cannot be told is never stored as if it had none."""
    sources: list[dict] = []
    for provider in list(_providers.values()):
        sources += provider(context)
    return sources


def file_names(sources: list[dict]) -> str:
    """The files among `sources`, named for a sentence: "runbook.pdf and notes.txt"."""
    names = [str(source.get("name") or "a file") for source in sources]
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def sources_shown(sources: list[dict], readable_chat_ids) -> list[dict]:
    """`sources` as a page shows them to someone who reads the chats `readable_chat_ids`:
    name and link for those, and neither for a file of a chat they do not read (its name is
    not theirs to read)."""
    shown = []
    for source in sources or []:
        if source.get("chat_id") in readable_chat_ids:
            shown.append({"name": source.get("name") or "a file", "url": source.get("url") or ""})
        else:
            shown.append({"name": "", "url": ""})
    return shown
