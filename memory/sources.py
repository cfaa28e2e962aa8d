"""Memory drawn from a file: where it may land, so it never reaches a wider audience than the
readers of the file's chat (issue 33).

The sources come from `chats.work_sources` (attachments: the files on the message a turn
answers, the files it read with `attachment_read`, or those of a review's range); every one
is a file of the chat the work was done in. An addition or a replacement with file sources
may land only where the readers of what it says are readers of those files:

- the memory of that chat (shown only there);
- a person's private entry about the author of the change (shown only where that person is
  the one reader, and they read the file's chat: they wrote in it).

Team memory (every chat), another chat's memory, and a shared entry about a person (every
chat) are refused with a sentence the model can act on. A removal carries no text and is
never refused for it. A knowledge collection's passage (issue 35) is bounded the same way,
unless everyone may read the collection (`chats.work_sources.bounding`): a restricted one is
on only in a chat whose members all read it. An entry keeps the sources of every change made
to it from a file or collection (`MemoryEntry.sources`); its audit events name them
(`detail["sources"]`)."""

from chats.work_sources import bounding, drawn_from
from memory.models import MemoryBook, Scope, Visibility
from memory.policy import book_is_about


def file_source_refusal(book: MemoryBook, author, *, change: str, visibility: str) -> str | None:
    """Why a change drawn from files may not land in `book`, or None (see the module)."""
    sources = bounding(author.sources)
    if not sources or change == "remove":
        return None
    chats = {source.get("chat_id") for source in sources}
    if book.scope == Scope.CHAT and chats == {book.chat_id}:
        return None
    chat_id = author.chat.pk if author.chat is not None else None
    person = author.person
    if person is None and author.actor is not None and author.actor.person_id is not None:
        person = author.actor.person
    if (
        book.scope == Scope.USER
        and visibility != Visibility.SHARED
        and chats == {chat_id}
        and book_is_about(book, person=person, actor=author.actor)
    ):
        return None
    if book.scope == Scope.TEAM:
        where = "team memory is shown in every chat"
    elif book.scope == Scope.CHAT:
        where = "another chat's memory is shown to that chat's readers"
    elif visibility == Visibility.SHARED:
        where = "a shared entry about a person is shown in every chat"
    else:
        where = "a private entry about someone else is shown where they read"
    return (
        f"Not stored: this draws on {drawn_from(sources)}, and {where}. Save it in this "
        'chat\'s memory (scope "chat") instead, or as a private entry about the person who '
        "asked; nothing changed."
    )


def merged_sources(existing: list | None, new) -> list:
    """`existing` with the sources of `new` it lacks (by kind and id), in order."""
    result = list(existing or [])
    seen = {(source.get("kind"), source.get("id")) for source in result}
    for source in new:
        if (source.get("kind"), source.get("id")) not in seen:
            result.append(dict(source))
            seen.add((source.get("kind"), source.get("id")))
    return result
