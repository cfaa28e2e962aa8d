"""Cheap misses for 2-character ASCII terms on PostgreSQL (used by `chats.search`).

A term like `qz` has no trigram, so the trigram index cannot say whether it occurs, and a
miss used to walk the whole readable history. (SQLite answers it from its trigram
vocabulary, migration 0010.)

`chats_search_pair` holds every pair of adjacent ASCII letters or digits that occurs,
lower-cased, in some message's text: at most 36 × 36 rows. A pair of letters and digits in
a text lies inside one run of them, so the runs of `lower(text)` give them all; ILIKE
lowers both sides the same way, so a pair missing here is in no text. Insert triggers add
new pairs (a statement's rows at once, in one sorted insert); an edit adds the new text's.
Deleting or editing a message does not remove pairs: the table may say "maybe" for a pair
no text holds any more, and the search then looks (a superset is always safe).

`chats_ascii_pairs(text)` is linear in the text's length: `substr` at each offset of a
1 MB run would be quadratic (see migration 0010), so each run is cut into pairs by two
regular-expression passes, one from its first character and one from its second.

SQLite: nothing to do. Hand-written and free of app imports, like 0002 and 0010.
"""

from django.db import migrations

POSTGRESQL_CREATE = [
    "CREATE TABLE IF NOT EXISTS chats_search_pair (pair text PRIMARY KEY)",
    r"""
    CREATE OR REPLACE FUNCTION chats_ascii_pairs(t text) RETURNS SETOF text
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
        SELECT DISTINCT p[1]
        FROM regexp_split_to_table(lower(t), '[^a-z0-9]+') AS run,
             LATERAL (
                SELECT regexp_matches(run, '..', 'g')
                UNION ALL
                SELECT regexp_matches(substr(run, 2), '..', 'g')
             ) AS pairs(p)
        WHERE length(run) >= 2
    $$
    """,
    """
    CREATE OR REPLACE FUNCTION chats_search_pairs_insert() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO chats_search_pair (pair)
        SELECT DISTINCT p FROM new_rows, chats_ascii_pairs(new_rows.text) AS p
        ORDER BY p
        ON CONFLICT DO NOTHING;
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE OR REPLACE FUNCTION chats_search_pairs_edit() RETURNS trigger
    LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO chats_search_pair (pair)
        SELECT p FROM chats_ascii_pairs(NEW.text) AS p ORDER BY p
        ON CONFLICT DO NOTHING;
        RETURN NULL;
    END
    $$
    """,
    "DROP TRIGGER IF EXISTS chats_message_pairs_insert ON chats_message",
    """
    CREATE TRIGGER chats_message_pairs_insert AFTER INSERT ON chats_message
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION chats_search_pairs_insert()
    """,
    "DROP TRIGGER IF EXISTS chats_message_pairs_edit ON chats_message",
    """
    CREATE TRIGGER chats_message_pairs_edit AFTER UPDATE OF text ON chats_message
    FOR EACH ROW WHEN (OLD.text IS DISTINCT FROM NEW.text)
    EXECUTE FUNCTION chats_search_pairs_edit()
    """,
    """
    INSERT INTO chats_search_pair (pair)
    SELECT DISTINCT p FROM chats_message, chats_ascii_pairs(chats_message.text) AS p
    ON CONFLICT DO NOTHING
    """,
]

POSTGRESQL_DROP = [
    "DROP TRIGGER IF EXISTS chats_message_pairs_edit ON chats_message",
    "DROP TRIGGER IF EXISTS chats_message_pairs_insert ON chats_message",
    "DROP FUNCTION IF EXISTS chats_search_pairs_edit()",
    "DROP FUNCTION IF EXISTS chats_search_pairs_insert()",
    "DROP FUNCTION IF EXISTS chats_ascii_pairs(text)",
    "DROP TABLE IF EXISTS chats_search_pair",
]


def _run(schema_editor, statements):
    for statement in statements:
        schema_editor.execute(statement, params=None)


def create(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        _run(schema_editor, POSTGRESQL_CREATE)


def drop(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        _run(schema_editor, POSTGRESQL_DROP)


class Migration(migrations.Migration):
    dependencies = [("chats", "0011_person_notice")]

    operations = [migrations.RunPython(create, drop, elidable=False)]
