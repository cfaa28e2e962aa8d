"""PostgreSQL: the planner keeps the 10,000 most common lexemes of `search_vector` (statistics
target 1000, was the default 100: 1,000 lexemes). knowledge.term_stats reads them to leave a
question's frequent terms out of full-text search; with 1,000 lexemes at 200,000 passages
every lexeme it did not keep could still be in ~1 % of them (2,000 passages), too coarse to
choose. ANALYZE then reads up to 300,000 rows (~40 s at 200,000 passages on a loaded 2-core
machine, in autovacuum). Nothing on SQLite. Hand-written, free of app imports."""

from django.db import migrations


def _statistics(target: int):
    def run(apps, schema_editor):
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(
                "ALTER TABLE knowledge_passage ALTER COLUMN search_vector "
                f"SET STATISTICS {int(target)}"
            )

    return run


class Migration(migrations.Migration):
    dependencies = [("knowledge", "0004_passage_search_heading")]

    operations = [migrations.RunPython(_statistics(1000), _statistics(-1), elidable=False)]
