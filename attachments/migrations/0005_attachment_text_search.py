"""Search inside attachments: an index over what the hub derived from each file (its
extracted text, and its description), which `chats.search` reads through the search text
sources registry (`chats.search_sources`, registered in AttachmentsConfig.ready()).

SQLite: an external-content FTS5 table with the trigram tokenizer over
attachments_attachment(extracted_text, description), kept current by triggers and
backfilled with 'rebuild' (as chats/0002 does for messages). PostgreSQL: a pg_trgm GIN
index on each of the two columns (the extension comes from chats/0002).

Hand-written and free of app imports. On SQLite, a later migration that makes Django remake
attachments_attachment (copy, drop, rename) drops the triggers with the old table and must
run SQLITE_TRIGGERS again: tests/attachments/test_search_text.py fails loudly if it does not.
"""

from django.db import migrations

SQLITE_CREATE = [
    """
    CREATE VIRTUAL TABLE attachments_attachment_fts USING fts5(
        extracted_text,
        description,
        content='attachments_attachment',
        content_rowid='id',
        tokenize='trigram'
    )
    """,
]

SQLITE_TRIGGERS = [
    """
    CREATE TRIGGER attachments_attachment_fts_insert AFTER INSERT ON attachments_attachment
    BEGIN
        INSERT INTO attachments_attachment_fts(rowid, extracted_text, description)
        VALUES (new.id, new.extracted_text, new.description);
    END
    """,
    """
    CREATE TRIGGER attachments_attachment_fts_delete AFTER DELETE ON attachments_attachment
    BEGIN
        INSERT INTO attachments_attachment_fts(
            attachments_attachment_fts, rowid, extracted_text, description
        ) VALUES ('delete', old.id, old.extracted_text, old.description);
    END
    """,
    # External content: the index must be told the old text to remove its trigrams. Only
    # a change of the text re-indexes it (a state change does not).
    """
    CREATE TRIGGER attachments_attachment_fts_update
    AFTER UPDATE OF id, extracted_text, description ON attachments_attachment
    WHEN old.id IS NOT new.id OR old.extracted_text IS NOT new.extracted_text
        OR old.description IS NOT new.description
    BEGIN
        INSERT INTO attachments_attachment_fts(
            attachments_attachment_fts, rowid, extracted_text, description
        ) VALUES ('delete', old.id, old.extracted_text, old.description);
        INSERT INTO attachments_attachment_fts(rowid, extracted_text, description)
        VALUES (new.id, new.extracted_text, new.description);
    END
    """,
]

SQLITE_BACKFILL = (
    "INSERT INTO attachments_attachment_fts(attachments_attachment_fts) VALUES ('rebuild')"
)

SQLITE_DROP = [
    "DROP TRIGGER IF EXISTS attachments_attachment_fts_update",
    "DROP TRIGGER IF EXISTS attachments_attachment_fts_delete",
    "DROP TRIGGER IF EXISTS attachments_attachment_fts_insert",
    "DROP TABLE IF EXISTS attachments_attachment_fts",
]

POSTGRESQL_CREATE = [
    "CREATE EXTENSION IF NOT EXISTS pg_trgm",
    "CREATE INDEX IF NOT EXISTS attachments_extracted_text_trgm "
    "ON attachments_attachment USING gin (extracted_text gin_trgm_ops)",
    "CREATE INDEX IF NOT EXISTS attachments_description_trgm "
    "ON attachments_attachment USING gin (description gin_trgm_ops)",
]

POSTGRESQL_DROP = [
    "DROP INDEX IF EXISTS attachments_description_trgm",
    "DROP INDEX IF EXISTS attachments_extracted_text_trgm",
]


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
    dependencies = [
        ("attachments", "0004_messages_carry_files"),
        ("chats", "0002_message_search"),
    ]

    operations = [migrations.RunPython(create_search_index, drop_search_index, elidable=False)]
