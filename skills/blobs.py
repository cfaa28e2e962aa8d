"""Binary files of skills (fonts, PDFs, archives): stored once by SHA-256 through the
`skills` alias of Django's STORAGES (a folder under var/ by default, any backend such as
S3-compatible storage where several machines serve the hub), read back for export and
download. Never rendered, never changed or deleted once written: versions are immutable and
name their binaries by hash. A blob stored for an import that was then refused stays,
unreferenced, and is reused by the next import of the same bytes.
"""

import hashlib
import mimetypes

from django.core.files.base import ContentFile
from django.db import IntegrityError, transaction

from skills.models import SkillBlob


def blob_sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def skill_blobs_store(binaries: dict[str, bytes]) -> dict[str, str]:
    """Store each binary once by its SHA-256 (a file in the `skills` storage and a SkillBlob
    row) and return {path: sha256}; a blob already stored is not written again. Runs outside
    any skill's lock: a slow storage backend never holds the database."""
    stored = {}
    for path, data in binaries.items():
        sha = blob_sha256(data)
        stored[path] = sha
        if SkillBlob.objects.filter(pk=sha).exists():
            continue
        blob = SkillBlob(
            sha256=sha,
            size=len(data),
            content_type=mimetypes.guess_type(path)[0] or "application/octet-stream",
        )
        name = f"{sha[:2]}/{sha}"
        if blob.file.storage.exists(name):  # written by an import that was then refused
            blob.file.name = name
        else:
            blob.file.save(name, ContentFile(data), save=False)
        try:
            with transaction.atomic():
                blob.save(force_insert=True)
        except IntegrityError:
            pass  # another import stored the same bytes meanwhile
    return stored


def blob_bytes(sha256: str) -> bytes:
    """The bytes of a stored blob (SkillBlob.DoesNotExist if there is none)."""
    blob = SkillBlob.objects.get(pk=sha256)
    with blob.file.open("rb") as handle:
        return handle.read()


def blob_sizes(shas) -> dict[str, tuple[int, str]]:
    """{sha256: (size, content type)} of the stored blobs among `shas`, in one query."""
    rows = SkillBlob.objects.filter(pk__in=list(shas)).values_list("sha256", "size", "content_type")
    return {sha: (size, kind) for sha, size, kind in rows}
