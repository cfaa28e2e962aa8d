"""The full-text index reads a passage's heading path apart from its body, so a heading's
words weigh more in the ranking (knowledge.search.HEADING_WEIGHT, PG_HEADING_WEIGHT): a question naming "interactive
mode" or "detached HEAD" finds that section before a long OPTIONS section that mentions it
in passing.

`search_text` stays one column: its first line is the heading path (empty when the passage
has none; knowledge.indexing.passage_search_text), the rest the body.

SQLite: the FTS5 table gets two columns (heading, body) filled by the triggers from
search_text; contentless (content=''), since knowledge_passage has no such columns to read
back (search only needs rowids and bm25()). PostgreSQL: the stored `search_vector` is rebuilt
with the heading at weight A and the body at weight D (ts_rank weighs them).

Hand-written and free of app imports (migrations never import app code).
"""

from django.db import migrations

# The heading (first line) and body (the rest) of a search_text, in SQLite's SQL.
_HEADING = "substr({t}, 1, max(instr({t}, char(10)) - 1, 0))"
_BODY = "substr({t}, instr({t}, char(10)) + 1)"


def _parts(row: str) -> str:
    text = f"{row}.search_text"
    return f"{_HEADING.format(t=text)}, {_BODY.format(t=text)}"


SQLITE_DROP_OLD = [
    "DROP TRIGGER IF EXISTS knowledge_passage_fts_update",
    "DROP TRIGGER IF EXISTS knowledge_passage_fts_delete",
    "DROP TRIGGER IF EXISTS knowledge_passage_fts_insert",
    "DROP TABLE IF EXISTS knowledge_passage_fts",
]

SQLITE_CREATE = [
    """
    CREATE VIRTUAL TABLE knowledge_passage_fts USING fts5(
        heading,
        body,
        content='',
        tokenize='porter unicode61 remove_diacritics 2'
    )
    """,
    f"""
    CREATE TRIGGER knowledge_passage_fts_insert AFTER INSERT ON knowledge_passage BEGIN
        INSERT INTO knowledge_passage_fts(rowid, heading, body) VALUES (new.id, {_parts("new")});
    END
    """,
    f"""
    CREATE TRIGGER knowledge_passage_fts_delete AFTER DELETE ON knowledge_passage BEGIN
        INSERT INTO knowledge_passage_fts(knowledge_passage_fts, rowid, heading, body)
        VALUES ('delete', old.id, {_parts("old")});
    END
    """,
    f"""
    CREATE TRIGGER knowledge_passage_fts_update AFTER UPDATE OF id, search_text
    ON knowledge_passage
    WHEN old.id IS NOT new.id OR old.search_text IS NOT new.search_text
    BEGIN
        INSERT INTO knowledge_passage_fts(knowledge_passage_fts, rowid, heading, body)
        VALUES ('delete', old.id, {_parts("old")});
        INSERT INTO knowledge_passage_fts(rowid, heading, body) VALUES (new.id, {_parts("new")});
    END
    """,
    "INSERT INTO knowledge_passage_fts(rowid, heading, body)"
    f" SELECT id, {_parts('knowledge_passage')} FROM knowledge_passage",
]

# Back to 0002's single-column external-content table.
SQLITE_CREATE_OLD = [
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

# Passages indexed before this migration without a heading: their first line was body text.
SQLITE_HEADINGLESS = (
    "UPDATE knowledge_passage SET search_text = char(10) || search_text WHERE section = ''"
)
POSTGRESQL_HEADINGLESS = (
    "UPDATE knowledge_passage SET search_text = E'\\n' || search_text WHERE section = ''"
)

_PG_HEADING = (
    "CASE WHEN strpos(search_text, E'\\n') > 0 THEN split_part(search_text, E'\\n', 1) ELSE '' END"
)
_PG_BODY = "substr(search_text, strpos(search_text, E'\\n') + 1)"

POSTGRESQL_CREATE = [
    "DROP INDEX IF EXISTS knowledge_passage_tsv",
    "ALTER TABLE knowledge_passage DROP COLUMN IF EXISTS search_vector",
    "ALTER TABLE knowledge_passage ADD COLUMN search_vector tsvector GENERATED ALWAYS AS ("
    f"setweight(to_tsvector('english'::regconfig, {_PG_HEADING}), 'A')"
    f" || setweight(to_tsvector('english'::regconfig, {_PG_BODY}), 'D')) STORED",
    "CREATE INDEX knowledge_passage_tsv ON knowledge_passage USING gin (search_vector)",
]

POSTGRESQL_CREATE_OLD = [
    "DROP INDEX IF EXISTS knowledge_passage_tsv",
    "ALTER TABLE knowledge_passage DROP COLUMN IF EXISTS search_vector",
    "ALTER TABLE knowledge_passage ADD COLUMN search_vector tsvector "
    "GENERATED ALWAYS AS (to_tsvector('english'::regconfig, search_text)) STORED",
    "CREATE INDEX knowledge_passage_tsv ON knowledge_passage USING gin (search_vector)",
]


def _run(schema_editor, statements):
    for statement in statements:
        schema_editor.execute(statement, params=None)


def weigh_headings(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        _run(schema_editor, [*SQLITE_DROP_OLD, SQLITE_HEADINGLESS, *SQLITE_CREATE])
    elif vendor == "postgresql":
        _run(schema_editor, [POSTGRESQL_HEADINGLESS, *POSTGRESQL_CREATE])


def unweigh_headings(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        _run(schema_editor, [*SQLITE_DROP_OLD, *SQLITE_CREATE_OLD])
    elif vendor == "postgresql":
        _run(schema_editor, POSTGRESQL_CREATE_OLD)


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0003_citation")]

    operations = [migrations.RunPython(weigh_headings, unweigh_headings, elidable=False)]
