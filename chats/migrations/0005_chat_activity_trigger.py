"""The database keeps `Chat.last_activity_at` at the newest message's stored time.

An AFTER INSERT trigger on chats_message bumps the chat (never backwards), so every writer
(ingestion, agent replies, imports, raw SQL) keeps the chat list order right without a
second statement from Python; it also halves the cost of storing a message on SQLite.

Hand-written, no app imports. On SQLite, a later migration that makes Django remake
chats_message drops this trigger with the old table and must create it again — the
ingestion tests fail loudly if it does not.
"""

from django.db import migrations

SQLITE_UP = [
    """
    CREATE TRIGGER chats_message_bump_chat AFTER INSERT ON chats_message BEGIN
        UPDATE chats_chat SET last_activity_at = new.created_at
        WHERE id = new.chat_id AND last_activity_at < new.created_at;
    END
    """,
]
SQLITE_DOWN = ["DROP TRIGGER IF EXISTS chats_message_bump_chat"]

POSTGRES_UP = [
    """
    CREATE FUNCTION chats_message_bump_chat() RETURNS trigger AS $$
    BEGIN
        UPDATE chats_chat SET last_activity_at = NEW.created_at
        WHERE id = NEW.chat_id AND last_activity_at < NEW.created_at;
        RETURN NULL;
    END
    $$ LANGUAGE plpgsql
    """,
    """
    CREATE TRIGGER chats_message_bump_chat AFTER INSERT ON chats_message
    FOR EACH ROW EXECUTE FUNCTION chats_message_bump_chat()
    """,
]
POSTGRES_DOWN = [
    "DROP TRIGGER IF EXISTS chats_message_bump_chat ON chats_message",
    "DROP FUNCTION IF EXISTS chats_message_bump_chat()",
]


def _run(schema_editor, statements):
    for statement in statements:
        schema_editor.execute(statement)


def create_trigger(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        _run(schema_editor, SQLITE_UP)
    elif vendor == "postgresql":
        _run(schema_editor, POSTGRES_UP)


def drop_trigger(apps, schema_editor):
    vendor = schema_editor.connection.vendor
    if vendor == "sqlite":
        _run(schema_editor, SQLITE_DOWN)
    elif vendor == "postgresql":
        _run(schema_editor, POSTGRES_DOWN)


class Migration(migrations.Migration):
    dependencies = [("chats", "0004_message_role_index")]

    operations = [migrations.RunPython(create_trigger, drop_trigger, elidable=False)]
