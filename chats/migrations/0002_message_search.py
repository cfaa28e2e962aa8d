"""Full-text search over message history (used by `chats.search`).

SQLite: an external-content FTS5 table with the trigram tokenizer over chats_message(text),
kept current by insert/update/delete triggers and backfilled with 'rebuild'.
PostgreSQL: the pg_trgm extension and a GIN trigram index on chats_message.text, which
serves `text ILIKE '%term%'`.

Hand-written and free of app imports (migrations never import app code). The objects are
not Django models, so the autodetector never sees them; on SQLite, a later migration that
makes Django remake chats_message (copy, drop, rename) drops the triggers with the old
table and must run SQLITE_TRIGGERS again — the search tests fail loudly if it does not.
"""

from django.db import migrations

SQLITE_CREATE = [
    """
    CREATE VIRTUAL TABLE chats_message_fts USING fts5(
        text,
        content='chats_message',
        content_rowid='id',
        tokenize='trigram'
    )
    """,
]

SQLITE_TRIGGERS = [
    """
    CREATE TRIGGER chats_message_fts_insert AFTER INSERT ON chats_message BEGIN
        INSERT INTO chats_message_fts(rowid, text) VALUES (new.id, new.text);
    END
    """,
    """
    CREATE TRIGGER chats_message_fts_delete AFTER DELETE ON chats_message BEGIN
        INSERT INTO chats_message_fts(chats_message_fts, rowid, text)
        VALUES ('delete', old.id, old.text);
    END
    """,
    # External content: the index must be told the old text to remove its trigrams.
    """
    CREATE TRIGGER chats_message_fts_update AFTER UPDATE OF id, text ON chats_message
    WHEN old.id IS NOT new.id OR old.text IS NOT new.text
    BEGIN
        INSERT INTO chats_message_fts(chats_message_fts, rowid, text)
        VALUES ('delete', old.id, old.text);
        INSERT INTO chats_message_fts(rowid, text) VALUES (new.id, new.text);
    END
    """,
]

SQLITE_BACKFILL = "INSERT INTO chats_message_fts(chats_message_fts) VALUES ('rebuild')"

SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS chats_message_fts_update",
    "DROP TRIGGER IF EXISTS chats_message_fts_delete",
    "DROP TRIGGER IF EXISTS chats_message_fts_insert",
    "DROP TABLE IF EXISTS chats_message_fts",
]

POSTGRESQL_CREATE = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX IF NOT EXISTS chats_message_text_trgm "
    "ON chats_message USING gin (text gin_trgm_ops)",
]

# The extension stays: other objects may use it, and dropping it needs more privileges.
POSTGRESQL_DROP = ["DROP INDEX IF EXISTS chats_message_text_trgm"]


def _run(schema_editor, statements):
    for statement in statements:
        schema_editor.execute(statement, params=None)


def create_search_index(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        _run(schema_editor, [*SQLITE_CREATE, *SQLITE_TRIGGERS, SQLITE_BACKFILL])
    elif vendor == "postgresql":
        _run(schema_editor, POSTGRESQL_CREATE)


def drop_search_index(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        _run(schema_editor, SQLITE_DROP)
    elif vendor == "postgresql":
        _run(schema_editor, POSTGRESQL_DROP)


class Migration(migrations.Migration):
    dependencies = [("chats", "0001_initial")]

    operations = [migrations.RunPython(create_search_index, drop_search_index, elidable=False)]
