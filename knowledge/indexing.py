"""A document's text into passages with vectors: split, embed (outside any transaction: it
takes time), then write in one short transaction that replaces the document's passages and
audits the change. A failure to embed keeps the passages (full-text search still finds them)
and leaves their vectors to `passages_embed_missing`, as does a folder sync, which stores
every file's passages first and embeds them after (knowledge.sync).
"""

import logging

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from knowledge.embeddings import EmbeddingsUnavailable, embedder, embedder_name, to_bytes
from knowledge.models import Collection, Document, KnowledgeEvent, Passage
from knowledge.services import audit
from knowledge.splitting import Piece, search_form, split_document

logger = logging.getLogger(__name__)
Kind = KnowledgeEvent.Kind
EMBED_BATCH = 32  # texts per call of the model


def passage_search_text(piece_section: str, text: str) -> str:
    """What the full-text index reads for a passage: its section path on the first line
    (empty when it has none; the index weighs it apart from the body, migration 0004) and
    its text, CJK as bigrams."""
    heading = " ".join(piece_section.split())
    return search_form(f"{heading}\n{text}")


def embed_texts(
    texts: list[str], *, known: dict[str, bytes] | None = None, defer: bool = False
) -> tuple[list[bytes | None], str, str]:
    """(vectors as bytes or None each, the model's name, the reason none were made). Texts in
    `known` (text -> vector of the current model) are not embedded again; with `defer`
    nothing is embedded now (only the known vectors are filled in)."""
    if not texts:
        return [], embedder_name(), ""
    known = known or {}
    if defer:
        return [known.get(text) for text in texts], embedder_name(), ""
    wanted = list(dict.fromkeys(text for text in texts if text not in known))
    made: dict[str, bytes] = {}
    try:
        model = embedder()
        for start in range(0, len(wanted), EMBED_BATCH):
            batch = wanted[start : start + EMBED_BATCH]
            for text, vector in zip(batch, model.passages(batch), strict=True):
                made[text] = to_bytes(vector)
    except EmbeddingsUnavailable as exc:
        logger.warning("knowledge: passages kept without vectors: %s", exc)
        return [known.get(text) for text in texts], embedder_name(), str(exc)
    return [known.get(text) or made[text] for text in texts], model.name, ""


def _embedding_input(section: str, text: str) -> str:
    return f"{section}\n{text}" if section else text


def _known_vectors(document: Document) -> dict[str, bytes]:
    """The document's current passages' vectors of the current model, by embedded text: a
    changed document re-embeds only the passages whose text changed."""
    rows = Passage.objects.filter(
        document=document, embedding_model=embedder_name(), embedding__isnull=False
    ).values_list("section", "text", "embedding")
    return {_embedding_input(section, text): bytes(vector) for section, text, vector in rows}


def _vector_literal(data: bytes) -> str:
    from knowledge.embeddings import from_bytes

    return "[" + ",".join(f"{x:.6f}" for x in from_bytes(data)) + "]"


def write_pgvector(rows: list[tuple[int, bytes]]) -> None:
    """Copy vectors into pgvector's column (PostgreSQL only)."""
    if connection.vendor != "postgresql" or not rows:
        return
    with connection.cursor() as cursor:
        cursor.executemany(
            "UPDATE knowledge_passage SET embedding_vec = %s::vector WHERE id = %s",
            [(_vector_literal(data), pk) for pk, data in rows],
        )


def document_store_text(
    *,
    document: Document,
    text: str,
    paged: bool,
    media_type: str,
    page_count: int,
    content_hash: str,
    size: int,
    sync_run=None,
    by=None,
    kind: str = Kind.DOCUMENT_INDEXED,
    embed_now: bool = True,
) -> Document:
    """Replace `document`'s passages with those of `text` and mark it ready; audited as
    `kind`. The splitting and embedding happen before the transaction. Without `embed_now`
    the passages whose text is new are stored without vectors, for `passages_embed_missing`
    (a folder sync stores every file first, then embeds: knowledge.sync)."""
    pieces: list[Piece] = split_document(
        text, paged=paged, max_tokens=settings.KNOWLEDGE_PASSAGE_TOKENS
    )
    limit = settings.KNOWLEDGE_MAX_PASSAGES_PER_DOCUMENT
    note = ""
    if len(pieces) > limit:
        note = f"Only its first {limit:,} passages of {len(pieces):,} are searched."
        pieces = pieces[:limit]
    vectors, model_name, missing = embed_texts(
        [_embedding_input(p.section, p.text) for p in pieces],
        known=_known_vectors(document),
        defer=not embed_now,
    )
    pending = 0 if embed_now else sum(vector is None for vector in vectors)
    title = next((p.section.split(" › ")[0] for p in pieces if p.section), "")
    now = timezone.now()
    with transaction.atomic():
        locked = Document.objects.select_for_update().get(pk=document.pk)
        Passage.objects.filter(document=locked).delete()
        created = Passage.objects.bulk_create(
            [
                Passage(
                    document=locked,
                    collection_id=locked.collection_id,
                    ordinal=piece.ordinal,
                    section=piece.section[:500],
                    page=piece.page,
                    text=piece.text,
                    search_text=passage_search_text(piece.section, piece.text),
                    token_count=piece.token_count,
                    embedding=vector,
                    embedding_model=model_name if vector is not None else "",
                )
                for piece, vector in zip(pieces, vectors, strict=True)
            ]
        )
        write_pgvector([(p.pk, p.embedding) for p in created if p.embedding is not None])
        Document.objects.filter(pk=locked.pk).update(
            text=text,
            title=title[:300],
            media_type=media_type,
            page_count=page_count,
            passage_count=len(created),
            content_hash=content_hash,
            size=size,
            state=Document.State.READY,
            reason=note,
            indexed_at=now,
            updated_at=now,
        )
        Collection.objects.filter(pk=locked.collection_id).update(updated_at=now)
        audit(
            locked.collection,
            kind,
            by=by,
            document=locked,
            sync_run=sync_run,
            content_hash=content_hash,
            passages=len(created),
            **({"vectors_missing": missing} if missing else {}),
            **({"vectors_pending": pending} if pending else {}),
        )
    document.refresh_from_db()
    return document


def document_mark_failed(
    *, document: Document, reason: str, content_hash: str, size: int, sync_run=None, by=None
) -> Document:
    """The document gives no passages (binary, unreadable, too big): its old passages go,
    its state says why. Audited."""
    now = timezone.now()
    with transaction.atomic():
        locked = Document.objects.select_for_update().get(pk=document.pk)
        Passage.objects.filter(document=locked).delete()
        Document.objects.filter(pk=locked.pk).update(
            state=Document.State.FAILED,
            reason=reason[:2000],
            content_hash=content_hash,
            size=size,
            text="",
            passage_count=0,
            indexed_at=now,
            updated_at=now,
        )
        Collection.objects.filter(pk=locked.collection_id).update(updated_at=now)
        audit(
            locked.collection,
            Kind.DOCUMENT_FAILED,
            by=by,
            document=locked,
            sync_run=sync_run,
            reason=reason[:500],
        )
    document.refresh_from_db()
    return document


def passages_embed_missing(*, limit: int = 2000, collection_ids: list[int] | None = None) -> int:
    """Embed passages (of those collections, or all) that have no vector of the current
    model (stored by a folder sync before embedding, an embeddings server was down, the
    model changed); bounded per call. Returns how many were embedded."""
    name = embedder_name()
    waiting = Passage.objects.exclude(embedding_model=name)
    if collection_ids is not None:
        waiting = waiting.filter(collection_id__in=collection_ids)
    rows = list(waiting.order_by("id").values_list("id", "section", "text")[:limit])
    if not rows:
        return 0
    vectors, model_name, missing = embed_texts(
        [_embedding_input(section, text) for _id, section, text in rows]
    )
    if missing:
        return 0
    if model_name != name:  # never loop over passages a differently named model keeps missing
        logger.error("knowledge: embedder %s names its vectors %s", name, model_name)
        return 0
    done = 0
    with transaction.atomic():
        for (pk, _section, _text), vector in zip(rows, vectors, strict=True):
            done += Passage.objects.filter(pk=pk).update(
                embedding=vector, embedding_model=model_name
            )
        write_pgvector([(pk, vector) for (pk, _s, _t), vector in zip(rows, vectors, strict=True)])
        touched = Passage.objects.filter(pk__in=[pk for pk, _s, _t in rows])
        Collection.objects.filter(pk__in=touched.values("collection_id")).update(
            updated_at=timezone.now()
        )
    return done


def document_index_file(
    *,
    document: Document,
    path,
    size: int,
    content_hash: str,
    sync_run=None,
    by=None,
    embed_now: bool = True,
) -> bool:
    """Read the file at `path` (knowledge.extract) and index it as `document`'s text, or mark
    the document failed with why: a file that cannot be read never stops a sync or an upload.
    True when it was indexed."""
    from knowledge.extract import Unreadable, read_file

    try:
        found = read_file(path, size=size)
    except Unreadable as exc:
        reason = str(exc)
    except Exception as exc:  # noqa: BLE001 - one bad file never stops the others
        logger.exception("knowledge: reading %s for document %s failed", path, document.pk)
        reason = f"could not be read: {exc}"
    else:
        document_store_text(
            document=document, text=found.text, paged=found.paged, media_type=found.media_type,
            page_count=found.page_count, content_hash=content_hash, size=size,
            sync_run=sync_run, by=by, embed_now=embed_now,
        )  # fmt: skip
        return True
    document_mark_failed(
        document=document, reason=reason, content_hash=content_hash, size=size,
        sync_run=sync_run, by=by,
    )  # fmt: skip
    return False
