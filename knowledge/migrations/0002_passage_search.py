"""Ranked full-text search and vectors over passages (used by `knowledge.search`).

SQLite: an external-content FTS5 table over knowledge_passage(search_text) with the porter
stemmer on unicode61 (ranked by bm25()), kept current by triggers. CJK text is indexed as
character bigrams already in `search_text` (knowledge.splitting.search_form), so the same
tokenizer serves Chinese. Vectors stay in knowledge_passage.embedding (float32 bytes) and are
searched by knowledge.vectors (numpy), since this Python's sqlite3 may not load extensions.

PostgreSQL: a stored generated column `search_vector` = to_tsvector('english', search_text)
in a GIN index (ranked by ts_rank_cd), and
the pgvector extension with a `vector` column and an HNSW cosine index for 384-dimension
vectors (the default offline model's). The extension must be installed on the server:
scripts/install-pgvector (CI runs it); without it this migration fails, saying so.

Hand-written and free of app imports (migrations never import app code).
"""

from django.db import migrations

SQLITE_CREATE = [
    """
    CREATE VIRTUAL TABLE knowledge_passage_fts USING fts5(
        search_text,
        content='knowledge_passage',
        content_rowid='id',
        tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    """
    CREATE TRIGGER knowledge_passage_fts_insert AFTER INSERT ON knowledge_passage BEGIN
        INSERT INTO knowledge_passage_fts(rowid, search_text) VALUES (new.id, new.search_text);
    END
    """,
    """
    CREATE TRIGGER knowledge_passage_fts_delete AFTER DELETE ON knowledge_passage BEGIN
        INSERT INTO knowledge_passage_fts(knowledge_passage_fts, rowid, search_text)
        VALUES ('delete', old.id, old.search_text);
    END
    """,
    """
    CREATE TRIGGER knowledge_passage_fts_update AFTER UPDATE OF id, search_text
    ON knowledge_passage
    WHEN old.id IS NOT new.id OR old.search_text IS NOT new.search_text
    BEGIN
        INSERT INTO knowledge_passage_fts(knowledge_passage_fts, rowid, search_text)
        VALUES ('delete', old.id, old.search_text);
        INSERT INTO knowledge_passage_fts(rowid, search_text) VALUES (new.id, new.search_text);
    END
    """,
    "INSERT INTO knowledge_passage_fts(knowledge_passage_fts) VALUES ('rebuild')",
]

SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS knowledge_passage_fts_update",
    "DROP TRIGGER IF EXISTS knowledge_passage_fts_delete",
    "DROP TRIGGER IF EXISTS knowledge_passage_fts_insert",
    "DROP TABLE IF EXISTS knowledge_passage_fts",
]

POSTGRESQL_CREATE = [
    # Stored, so that ranking reads the vector instead of parsing every matching passage.
    "ALTER TABLE knowledge_passage ADD COLUMN IF NOT EXISTS search_vector tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english'::regconfig, search_text)) STORED",
    "CREATE INDEX IF NOT EXISTS knowledge_passage_tsv ON knowledge_passage "
    "USING gin (search_vector)",
    "CREATE EXTENSION IF NOT EXISTS vector",
    "ALTER TABLE knowledge_passage ADD COLUMN IF NOT EXISTS embedding_vec vector",
    # Only vectors of 384 dimensions are indexed (an expression index needs one size);
    # vectors of another model are searched exactly (knowledge.vectors).
    "CREATE INDEX IF NOT EXISTS knowledge_passage_hnsw ON knowledge_passage "
    "USING hnsw ((embedding_vec::vector(384)) vector_cosine_ops) "
    "WHERE vector_dims(embedding_vec) = 384",
]

POSTGRESQL_DROP = [
    "DROP INDEX IF EXISTS knowledge_passage_hnsw",
    "ALTER TABLE knowledge_passage DROP COLUMN IF EXISTS embedding_vec",
    "DROP INDEX IF EXISTS knowledge_passage_tsv",
    "ALTER TABLE knowledge_passage DROP COLUMN IF EXISTS search_vector",
]


def _run(schema_editor, statements):
    for statement in statements:
        schema_editor.execute(statement, params=None)


def create_search(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        _run(schema_editor, SQLITE_CREATE)
    elif vendor == "postgresql":
        with schema_editor.connection.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
            if cursor.fetchone() is None:
                raise RuntimeError(
                    "The PostgreSQL server has no pgvector extension, which team knowledge "
                    "needs: install it with scripts/install-pgvector (docs/KNOWLEDGE.md)."
                )
        _run(schema_editor, POSTGRESQL_CREATE)


def drop_search(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        _run(schema_editor, SQLITE_DROP)
    elif vendor == "postgresql":
        _run(schema_editor, POSTGRESQL_DROP)


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0001_initial")]

    operations = [migrations.RunPython(create_search, drop_search, elidable=False)]
