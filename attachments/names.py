"""A file's name as a person gave it, made safe to keep and to send back: NFC-normalised,
no folders, no control characters, bounded; downloads carry it as RFC 5987 `filename*` so
Chinese and Japanese names arrive intact."""

import unicodedata
from urllib.parse import quote

MAX_NAME_CHARS = 255
FALLBACK_NAME = "file"


def clean_file_name(name: str) -> str:
    """The last path component of `name`, NFC, without control or format characters."""
    name = unicodedata.normalize("NFC", name or "")
    name = name.replace("\\", "/").rsplit("/", 1)[-1]
    name = "".join(ch for ch in name if unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp"))
    name = name.strip().strip(".").strip()
    if len(name) > MAX_NAME_CHARS:
        stem, dot, suffix = name.rpartition(".")
        if dot and 0 < len(suffix) <= 16:
            name = stem[: MAX_NAME_CHARS - len(suffix) - 1] + "." + suffix
        else:
            name = name[:MAX_NAME_CHARS]
    return name or FALLBACK_NAME


def download_disposition(name: str) -> str:
    """`attachment` with an ASCII fallback `filename` (other characters as `_`) for old
    clients and the exact name as `filename*=UTF-8''<percent-encoded>` (RFC 6266/5987)."""
    name = clean_file_name(name)
    fallback = "".join(ch if 32 <= ord(ch) < 127 and ch not in '"\\%' else "_" for ch in name)
    return f"attachment; filename=\"{fallback}\"; filename*=UTF-8''{quote(name, safe='')}"
