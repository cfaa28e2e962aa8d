"""Cheap misses for 2-character Chinese terms (used by `chats.search._surely_missing`).

Trigram indexes cannot look up a 2-character term, so a 2-character Chinese word that occurs
nowhere used to scan the whole readable history. These objects answer "does it occur
anywhere at all?" from an index:

SQLite: a 2-character string occurs in a text iff a trigram of the text starts with it, or
the text ends with it. `chats_message_fts_vocab` (fts5vocab over the trigram index) lists
the trigrams, searchable by prefix; `chats_message_text_tail` indexes the last two
characters of every text.
PostgreSQL: `chats_cjk_bigrams(text)` lists the distinct pairs of adjacent CJK characters
of a text (code points from U+2E80), and a GIN index over it answers `@> ARRAY['猫狗']`.
The function is linear in the text's length (one pass over its characters: `substr` at
each offset would be quadratic, and a 1 MB message would take minutes to store).

Hand-written and free of app imports, like 0002. If a later migration makes Django remake
chats_message on SQLite, the tail index goes with the old table: searches stay correct,
only 2-character misses get slow again (run SQLITE_CREATE once more).
"""

from django.db import migrations

SQLITE_CREATE = [
    "CREATE VIRTUAL TABLE IF NOT EXISTS chats_message_fts_vocab"
    " USING fts5vocab(chats_message_fts, 'row')",
    "CREATE INDEX IF NOT EXISTS chats_message_text_tail ON chats_message(substr(text, -2))",
]

SQLITE_DROP = [
    "DROP INDEX IF EXISTS chats_message_text_tail",
    "DROP TABLE IF EXISTS chats_message_fts_vocab",
]

POSTGRESQL_CREATE = [
    """
    CREATE OR REPLACE FUNCTION chats_cjk_bigrams(t text) RETURNS text[]
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
        SELECT coalesce(array_agg(DISTINCT ch || next_ch), '{}')
        FROM (
            SELECT ch, lead(ch) OVER (ORDER BY n) AS next_ch
            FROM unnest(string_to_array(t, NULL)) WITH ORDINALITY AS u(ch, n)
        ) AS pairs
        WHERE ascii(ch) >= 11904 AND ascii(next_ch) >= 11904
    $$
    """,
    "CREATE INDEX IF NOT EXISTS chats_message_cjk_bigrams"
    " ON chats_message USING gin (chats_cjk_bigrams(text))",
]

POSTGRESQL_DROP = [
    "DROP INDEX IF EXISTS chats_message_cjk_bigrams",
    "DROP FUNCTION IF EXISTS chats_cjk_bigrams(text)",
]


def _run(schema_editor, statements):
    for statement in statements:
        schema_editor.execute(statement, params=None)


def create(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        _run(schema_editor, SQLITE_CREATE)
    elif vendor == "postgresql":
        _run(schema_editor, POSTGRESQL_CREATE)


def drop(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        _run(schema_editor, SQLITE_DROP)
    elif vendor == "postgresql":
        _run(schema_editor, POSTGRESQL_DROP)


class Migration(migrations.Migration):
    dependencies = [("chats", "0009_api_token_kind")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
