# The tools a skill names (metadata.hermes.requires_tools / requires_toolsets), copied from
# its current version as the description is, so the prompt index needs no join. Skills that
# already name some (imported from Hermes) get them from their current version's front matter.

from django.db import migrations, models

KEYS = (("requires_tools", "tools"), ("requires_toolsets", "toolsets"))


def copy_requirements(apps, schema_editor):
    Skill = apps.get_model("skills", "Skill")
    for skill in Skill.objects.filter(current_version__isnull=False).select_related(
        "current_version"
    ):
        front = skill.current_version.front_matter
        metadata = front.get("metadata") if isinstance(front, dict) else None
        hermes = metadata.get("hermes") if isinstance(metadata, dict) else None
        if not isinstance(hermes, dict):
            continue
        needs = {}
        for key, short in KEYS:
            value = hermes.get(key)
            if isinstance(value, str):
                value = value.replace(",", " ").split()
            if isinstance(value, list):
                names = [item for item in value if isinstance(item, str) and 0 < len(item) <= 64]
                if names:
                    needs[short] = list(dict.fromkeys(names))[:32]
        if needs:
            Skill.objects.filter(pk=skill.pk).update(required_tools=needs)


class Migration(migrations.Migration):
    dependencies = [
        ("skills", "0007_personal_scope"),
    ]

    operations = [
        migrations.AddField(
            model_name="skill",
            name="required_tools",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.RunPython(copy_requirements, migrations.RunPython.noop),
    ]
