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

Other kinds name their own readers. Knowledge registers `{"kind": "collection", "id": 4,
"name": "Runbooks", "chat_id": 3, "how": "searched" | "offered", "url": ..., "everyone":
false}`: a restricted collection is on only in a chat whose members all read it, so the
same landing rule holds (that chat's memory, or a private entry of the person who asked);
`"everyone": true` (a collection everyone may read) bounds no audience. A page shows a
collection source only to a reader of the collection (`register_source_readers`).
"""

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

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


# kind -> (person, ids) -> the ids of that kind `person` may read (pages showing sources).
SourceReaders = Callable[[Any, list], set]
_readers: dict[str, SourceReaders] = {}


def register_source_readers(kind: str, readers: SourceReaders) -> None:
    """Say who may read sources of `kind` (other than files, read by their chat's readers)."""
    _readers[kind] = readers


def bounding(sources) -> list[dict]:
    """The sources that bound where work drawn from them may land: every file, and every
    other source not readable by everyone (`"everyone": true`)."""
    return [s for s in sources or () if s.get("kind") == "file" or not s.get("everyone")]


def drawn_from(sources: list[dict]) -> str:
    """What bounding `sources` are, for a refusal the model reads: "a file of this chat
    (runbook.pdf), which only this chat's readers may read", "the knowledge collection
    Runbooks, which only its readers may read", or both."""
    files = [s for s in sources if s.get("kind") == "file"]
    others = [s for s in sources if s.get("kind") != "file"]
    parts = []
    if files:
        parts.append(
            f"a file of this chat ({file_names(files)}), which only this chat's readers may read"
        )
    if others:
        many = len(others) > 1
        parts.append(
            f"the knowledge collection{'s' if many else ''} {file_names(others)}, which only "
            f"{'their' if many else 'its'} readers may read"
        )
    return "; and ".join(parts)


def readable_keys(person, sources) -> set[tuple]:
    """The (kind, id) of the non-file `sources` that `person` may read."""
    wanted: dict[str, list] = {}
    for source in sources:
        if source.get("kind") != "file":
            wanted.setdefault(str(source.get("kind")), []).append(source.get("id"))
    keys: set[tuple] = set()
    for kind, ids in wanted.items():
        readers = _readers.get(kind)
        if readers is not None:
            keys |= {(kind, i) for i in readers(person, ids)}
    return keys


def file_names(sources: list[dict]) -> str:
    """The files among `sources`, named for a sentence: "runbook.pdf and notes.txt"."""
    names = [str(source.get("name") or "a file") for source in sources]
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def sources_shown(sources: list[dict], readable_chat_ids, readable=frozenset()) -> list[dict]:
    """`sources` as a page shows them to someone who reads the chats `readable_chat_ids` and
    the other sources `readable` (`readable_keys`): name and link for those, and neither for
    a file of a chat they do not read or a collection they do not read (its name is not
    theirs to read). `what` and `hidden` are the page's words for the kind."""
    shown = []
    for source in sources or []:
        if source.get("kind", "file") == "file":
            what, hidden = "the file", "a file in a chat you do not read"
            visible = source.get("chat_id") in readable_chat_ids
        else:
            what, hidden = "the knowledge collection", "a knowledge collection you do not read"
            visible = (source.get("kind"), source.get("id")) in readable
        if visible:
            name = source.get("name") or "a file"
            shown.append({"name": name, "url": source.get("url") or "", "what": what})
        else:
            shown.append({"name": "", "url": "", "what": what, "hidden": hidden})
    return shown
