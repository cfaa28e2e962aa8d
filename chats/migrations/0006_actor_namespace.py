"""Actors get a namespace, and web and terminal actors are keyed by Person id.

Before, web and terminal actors were keyed by username, so a reused username inherited the
old person's actor (and with it their memory), and API users of every token shared one
namespace. Each person's oldest web (and terminal) actor is re-keyed to their Person id;
any other web actor moves to the `retired` namespace, where nothing is ever ingested again,
so its history keeps its author but nobody can speak as it. Terminal actors without a
Person were OS logins and move to the `os` namespace.
"""

from django.conf import settings
from django.db import migrations, models

PERSON_KEYED_CHANNELS = ("web", "cli")


def key_people_by_id(apps, schema_editor):
    Actor = apps.get_model("chats", "Actor")
    for channel in PERSON_KEYED_CHANNELS:
        seen: set[int] = set()
        for actor in Actor.objects.filter(channel=channel, namespace="").order_by("pk"):
            if actor.person_id is not None and actor.person_id not in seen:
                seen.add(actor.person_id)
                actor.external_id = str(actor.person_id)
            elif channel == "cli" and actor.person_id is None:
                actor.namespace = "os"
            else:
                actor.namespace = "retired"
            actor.save(update_fields=["external_id", "namespace"])


class Migration(migrations.Migration):
    dependencies = [
        ("chats", "0005_chat_activity_trigger"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="actor",
            name="actor_unique_per_channel",
        ),
        migrations.AddField(
            model_name="actor",
            name="namespace",
            field=models.CharField(blank=True, default="", max_length=64),
        ),
        migrations.RunPython(key_people_by_id, migrations.RunPython.noop, elidable=True),
        migrations.AddConstraint(
            model_name="actor",
            constraint=models.UniqueConstraint(
                fields=("channel", "namespace", "external_id"), name="actor_unique_per_namespace"
            ),
        ),
    ]
