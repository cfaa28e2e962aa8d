"""History exports that carry more than text: the record extras registry and the bundles
that hold the bytes records point at.

`chats.jsonl` writes one JSON line per message; an app that hangs things on messages (files,
say) registers a record extra in its `AppConfig.ready()`:

- `export(messages, bundle) -> {message pk: value}`: the record's `name` key for the messages
  that have something (one query for the batch); it may put bytes into the bundle (when there
  is one: plain JSON Lines to a file or stdout have none);
- `parse(value) -> parsed`: validates the key of an imported record, raising ValueError with
  a message for a person (the line is reported as bad, before anything is stored);
- `restore(message, parsed, bundle)`: stores it on the message just imported, in the
  record's transaction.

`chats` never learns what the extras are. A record without the key is left alone, so an
export of a history without files is the same as before extras existed.

A bundle is a folder (`history.jsonl` and `blobs/<sha256[:2]>/<sha256>`) or a tar archive
with the same names. Blobs are named by their SHA-256 and checked against it on import: a
bundle cannot make the hub store bytes under another content's name.
"""

import hashlib
import os
import re
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

if TYPE_CHECKING:
    from chats.models import Message

HISTORY_NAME = "history.jsonl"
BLOBS_FOLDER = "blobs"
_SHA256 = re.compile(r"[0-9a-f]{64}")
_COPY_CHUNK = 1024 * 1024


class BundleError(ValueError):
    """A bundle that cannot be read or written as asked; the message says why."""


def blob_path(sha256: str) -> str:
    """The name of a blob inside a bundle (checked: 64 lower-case hex digits)."""
    if not _SHA256.fullmatch(sha256 or ""):
        raise BundleError(f"not a SHA-256: {sha256!r}")
    return f"{BLOBS_FOLDER}/{sha256[:2]}/{sha256}"


class Bundle:
    """Where an export puts blobs and an import finds them."""

    def blob_put(self, sha256: str, size: int, stream: IO[bytes]) -> None:
        raise NotImplementedError

    def blob_open(self, sha256: str) -> IO[bytes] | None:
        """The blob's bytes, or None when the bundle does not hold it."""
        raise NotImplementedError

    def blob_read_verified(self, sha256: str, *, limit: int) -> bytes | None:
        """The blob's bytes when present, at most `limit` bytes and hashing to `sha256`;
        BundleError otherwise (a wrong or oversized blob is never stored)."""
        stream = self.blob_open(sha256)
        if stream is None:
            return None
        with stream:
            data = stream.read(limit + 1)
        if len(data) > limit:
            raise BundleError(f"blob {sha256[:12]}… is larger than {limit} bytes")
        if hashlib.sha256(data).hexdigest() != sha256:
            raise BundleError(f"blob {sha256[:12]}… does not match its SHA-256")
        return data


class FolderBundle(Bundle):
    """A folder: `history.jsonl` beside `blobs/`."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)

    @property
    def history_path(self) -> Path:
        return self.root / HISTORY_NAME

    def blob_put(self, sha256: str, size: int, stream: IO[bytes]) -> None:
        target = self.root / blob_path(sha256)
        if target.exists() and target.stat().st_size == size:
            return  # one blob for every message that has these bytes
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".partial")
        with open(partial, "wb") as out:
            shutil.copyfileobj(stream, out, _COPY_CHUNK)
        partial.replace(target)

    def blob_open(self, sha256: str) -> IO[bytes] | None:
        path = self.root / blob_path(sha256)
        return open(path, "rb") if path.is_file() else None


class TarWriter(Bundle):
    """A tar archive being written: blobs as they come, `history.jsonl` last (from a
    temporary file, since a tar member's size comes before its bytes)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._tar = tarfile.open(self.path, "w", format=tarfile.PAX_FORMAT)  # noqa: SIM115 - close()
        self._written: set[str] = set()

    def blob_put(self, sha256: str, size: int, stream: IO[bytes]) -> None:
        name = blob_path(sha256)
        if name in self._written:
            return
        info = tarfile.TarInfo(name)
        info.size = size
        info.mode = 0o600
        self._tar.addfile(info, stream)
        self._written.add(name)

    def add_history(self, path: Path) -> None:
        info = self._tar.gettarinfo(str(path), arcname=HISTORY_NAME)
        info.mode, info.uid, info.gid, info.uname, info.gname = 0o600, 0, 0, "", ""
        with open(path, "rb") as stream:
            self._tar.addfile(info, stream)

    def close(self) -> None:
        self._tar.close()


class TarReader(Bundle):
    """A tar archive written by TarWriter, read in place: only `history.jsonl` and blob
    names are looked at, only regular files, and nothing is extracted to disk."""

    def __init__(self, path: str | os.PathLike):
        try:
            self._tar = tarfile.open(path, "r:*")  # noqa: SIM115 - closed by close()
        except (tarfile.TarError, OSError) as exc:
            raise BundleError(f"not a readable tar archive: {exc}") from exc
        self._members = {m.name: m for m in self._tar.getmembers() if m.isreg()}

    def history(self) -> IO[bytes]:
        member = self._members.get(HISTORY_NAME)
        if member is None:
            raise BundleError(f"the archive has no {HISTORY_NAME}")
        return self._tar.extractfile(member)

    def blob_open(self, sha256: str) -> IO[bytes] | None:
        member = self._members.get(blob_path(sha256))
        return self._tar.extractfile(member) if member is not None else None

    def close(self) -> None:
        self._tar.close()


def bundle_for_reading(path: str) -> tuple[Bundle, Callable[[], IO[bytes]]]:
    """A folder or an archive to import: the bundle and an opener of its history lines."""
    if os.path.isdir(path):
        folder = FolderBundle(path)
        if not folder.history_path.is_file():
            raise BundleError(f"{path} has no {HISTORY_NAME}")
        return folder, lambda: open(folder.history_path, "rb")
    reader = TarReader(path)
    return reader, reader.history


def spooled_history() -> tuple[Path, Callable[[], None]]:
    """A temporary file for an archive's history lines, and its clean-up."""
    handle, name = tempfile.mkstemp(prefix="hermes-history-", suffix=".jsonl")
    os.close(handle)
    path = Path(name)
    return path, lambda: path.unlink(missing_ok=True)


# --- record extras ------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordExtra:
    name: str
    export: Callable[[Sequence["Message"], Bundle | None], dict[int, Any]]
    parse: Callable[[Any], Any]
    restore: Callable[["Message", Any, Bundle | None], None]


_record_extras: dict[str, RecordExtra] = {}


def register_record_extra(
    name: str,
    *,
    export: Callable[[Sequence["Message"], Bundle | None], dict[int, Any]],
    parse: Callable[[Any], Any],
    restore: Callable[["Message", Any, Bundle | None], None],
) -> None:
    """Add `name` to exported records and restore it on import (idempotent by name)."""
    _record_extras[name] = RecordExtra(name, export, parse, restore)


def record_extras() -> Iterable[RecordExtra]:
    return tuple(_record_extras.values())
