"""The search syntax's file filters, registered with `chats.search_query`:

    has:file              messages with at least one file (has:image, has:document,
                          has:audio, has:video: with a file of that kind)
    type:pdf              messages with a file of that type: a short name (pdf, png, jpeg,
                          docx, xlsx, pptx, csv, txt, html, …) or a media type (image/png);
                          the type is the one sniffed from the bytes, never the file's name

`TEXT_SOURCE` makes a plain search term also find messages whose files' derived text holds
it (extracted text, descriptions; transcripts land in the extracted text), through the index
of migration 0005 (`chats.search_sources` says how it is read and bounded).

Different filters narrow (`has:image type:pdf`: an image and a PDF); the same filter twice
takes either value (`type:png type:jpeg`), as from:, in: and channel: do.
"""

from attachments.models import Attachment
from chats.search_query import SearchQueryError
from chats.search_sources import SearchTextSource

HAS = {"file": None} | {kind: kind for kind in Attachment.Kind.values if kind != "other"}
TYPES = {
    "pdf": ("application/pdf",),
    "png": ("image/png",),
    "jpeg": ("image/jpeg",),
    "jpg": ("image/jpeg",),
    "gif": ("image/gif",),
    "webp": ("image/webp",),
    "docx": ("application/vnd.openxmlformats-officedocument.wordprocessingml.document",),
    "xlsx": ("application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",),
    "pptx": ("application/vnd.openxmlformats-officedocument.presentationml.presentation",),
    "doc": ("application/msword",),
    "xls": ("application/vnd.ms-excel",),
    "ppt": ("application/vnd.ms-powerpoint",),
    "csv": ("text/csv",),
    "txt": ("text/plain",),
    "text": ("text/plain",),
    "md": ("text/markdown",),
    "html": ("text/html",),
    "svg": ("image/svg+xml",),
    "zip": ("application/zip",),
    "mp3": ("audio/mpeg",),
    "ogg": ("audio/ogg",),
    "mp4": ("video/mp4",),
}
# Plain text is plain text by its bytes: what kind of text (a CSV, Markdown) only its name
# says, so for these the name's ending counts among plain-text files.
TEXT_SUFFIXES = {"csv": ".csv", "md": ".md", "py": ".py", "json": ".json", "log": ".log"}
_EXISTS = "EXISTS (SELECT 1 FROM attachments_attachment a WHERE a.message_id = m.id"


def has_check(value: str) -> str:
    value = value.casefold()
    if value.endswith("s") and value[:-1] in HAS:
        value = value[:-1]  # has:files, has:images
    if value not in HAS:
        raise SearchQueryError(
            f"has:{value} is not something a message has; use has:" + ", has:".join(HAS) + "."
        )
    return value


def has_condition(values: list[str]) -> tuple[str, list]:
    conditions, params = [], []
    for value in values:
        kind = HAS[value]
        if kind is None:
            conditions.append(_EXISTS + ")")
        else:
            conditions.append(_EXISTS + " AND a.kind = %s)")
            params.append(kind)
    return "(" + " OR ".join(conditions) + ")", params


def type_check(value: str) -> str:
    value = value.casefold().removeprefix(".")
    media_type = "/" in value and len(value) <= 127 and " " not in value
    if value in TYPES or value in TEXT_SUFFIXES or media_type:
        return value
    raise SearchQueryError(
        f"type:{value} is not a file type I know; use a name such as type:pdf, type:png, "
        "type:docx, type:xlsx, or a media type such as type:image/png."
    )


def type_condition(values: list[str]) -> tuple[str, list]:
    conditions, params = [], []
    for value in values:
        media_types = TYPES.get(value, () if value in TEXT_SUFFIXES else (value,))
        matches, match_params = [], []
        if media_types:
            matches.append(f"a.media_type IN ({', '.join(['%s'] * len(media_types))})")
            match_params += list(media_types)
        if value in TEXT_SUFFIXES:
            matches.append("(a.media_type = %s AND LOWER(a.name) LIKE %s)")
            match_params += ["text/plain", "%" + TEXT_SUFFIXES[value]]
        conditions.append(f"{_EXISTS} AND ({' OR '.join(matches)}))")
        params += match_params
    return "(" + " OR ".join(conditions) + ")", params


TEXT_SOURCE = SearchTextSource(
    name="attachments",
    noun="file",
    table=Attachment._meta.db_table,
    message_column="message_id",
    text_columns=("extracted_text", "description"),
    label_column="name",
    sqlite_fts_table="attachments_attachment_fts",  # migration 0005
)
