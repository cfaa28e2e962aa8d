"""The history version (`chats.HistoryVersion`) and the triggers that keep it.

A chat's INSERT creates its row (with a random version; existing chats get theirs here); an
UPDATE or DELETE of a message gives its chat(s) a new random version; a change of an actor's
display name gives scope 0 a new one. A new message changes nothing (the cache reads rows
newer than it holds, and counts the range it holds), so storing a message costs no more.
Random rather than counted, so a table emptied and filled again (a restore, a test flush)
never repeats a version a cache already holds.
"""

from django.db import migrations, models

CHAT, MESSAGE, ACTOR = "chats_chat", "chats_message", "chats_actor"
VERSION = "chats_historyversion"

SQLITE = [
    f"""CREATE TRIGGER chats_history_chat_insert AFTER INSERT ON {CHAT}
    BEGIN INSERT OR IGNORE INTO {VERSION} (scope, version) VALUES (NEW.id, random()); END""",
    f"""CREATE TRIGGER chats_history_message_update AFTER UPDATE ON {MESSAGE}
    BEGIN UPDATE {VERSION} SET version = random() WHERE scope IN (OLD.chat_id, NEW.chat_id);
    END""",
    f"""CREATE TRIGGER chats_history_message_delete AFTER DELETE ON {MESSAGE}
    BEGIN UPDATE {VERSION} SET version = random() WHERE scope = OLD.chat_id; END""",
    f"""CREATE TRIGGER chats_history_actor_rename AFTER UPDATE OF display_name ON {ACTOR}
    WHEN OLD.display_name IS NOT NEW.display_name
    BEGIN INSERT OR REPLACE INTO {VERSION} (scope, version) VALUES (0, random()); END""",
    f"INSERT OR IGNORE INTO {VERSION} (scope, version) SELECT id, random() FROM {CHAT}",
]
SQLITE_REVERSE = [
    "DROP TRIGGER IF EXISTS chats_history_chat_insert",
    "DROP TRIGGER IF EXISTS chats_history_message_update",
    "DROP TRIGGER IF EXISTS chats_history_message_delete",
    "DROP TRIGGER IF EXISTS chats_history_actor_rename",
]

RANDOM = "floor(random() * 9007199254740991)::bigint"
POSTGRESQL = [
    f"""CREATE FUNCTION chats_history_chat_created() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO {VERSION} (scope, version) VALUES (NEW.id, {RANDOM})
        ON CONFLICT (scope) DO NOTHING;
        RETURN NULL;
    END $$""",
    f"""CREATE TRIGGER chats_history_chat AFTER INSERT ON {CHAT}
    FOR EACH ROW EXECUTE FUNCTION chats_history_chat_created()""",
    f"""CREATE FUNCTION chats_history_message_changed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'UPDATE' THEN
            UPDATE {VERSION} SET version = {RANDOM} WHERE scope IN (OLD.chat_id, NEW.chat_id);
        ELSE
            UPDATE {VERSION} SET version = {RANDOM} WHERE scope = OLD.chat_id;
        END IF;
        RETURN NULL;
    END $$""",
    f"""CREATE TRIGGER chats_history_message AFTER UPDATE OR DELETE ON {MESSAGE}
    FOR EACH ROW EXECUTE FUNCTION chats_history_message_changed()""",
    f"""CREATE FUNCTION chats_history_actor_renamed() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO {VERSION} (scope, version) VALUES (0, {RANDOM})
        ON CONFLICT (scope) DO UPDATE SET version = EXCLUDED.version;
        RETURN NULL;
    END $$""",
    f"""CREATE TRIGGER chats_history_actor AFTER UPDATE OF display_name ON {ACTOR}
    FOR EACH ROW WHEN (OLD.display_name IS DISTINCT FROM NEW.display_name)
    EXECUTE FUNCTION chats_history_actor_renamed()""",
    f"""INSERT INTO {VERSION} (scope, version)
    SELECT id, {RANDOM} FROM {CHAT} ON CONFLICT (scope) DO NOTHING""",
]
POSTGRESQL_REVERSE = [
    f"DROP TRIGGER IF EXISTS chats_history_chat ON {CHAT}",
    "DROP FUNCTION IF EXISTS chats_history_chat_created()",
    f"DROP TRIGGER IF EXISTS chats_history_message ON {MESSAGE}",
    "DROP FUNCTION IF EXISTS chats_history_message_changed()",
    f"DROP TRIGGER IF EXISTS chats_history_actor ON {ACTOR}",
    "DROP FUNCTION IF EXISTS chats_history_actor_renamed()",
]


def _run(statements: dict):
    def run(apps, schema_editor):
        vendor = schema_editor.connection.vendor
        if vendor not in statements:
            raise RuntimeError(f"no history-version triggers for {vendor}")
        for sql in statements[vendor]:
            schema_editor.execute(sql)

    return run


class Migration(migrations.Migration):
    dependencies = [
        ("chats", "0013_turn_hold"),
    ]

    operations = [
        migrations.CreateModel(
            name="HistoryVersion",
            fields=[
                ("scope", models.BigIntegerField(primary_key=True, serialize=False)),
                ("version", models.BigIntegerField()),
            ],
        ),
        migrations.RunPython(
            _run({"sqlite": SQLITE, "postgresql": POSTGRESQL}),
            _run({"sqlite": SQLITE_REVERSE, "postgresql": POSTGRESQL_REVERSE}),
        ),
    ]
