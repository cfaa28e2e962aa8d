"""The accepted-hash of a flagged tool becomes the accepted version of any tool: only an
accepted version's annotations give its policy. Tools already stored are the versions the
hub had adopted: each unflagged one is accepted as it is, and servers already listed keep
their listing as the first one."""

from django.db import migrations, models
from django.db.models import F
from django.utils import timezone


def accept_what_was_there(apps, schema_editor):
    ServerTool = apps.get_model("toolservers", "ServerTool")
    ToolServer = apps.get_model("toolservers", "ToolServer")
    ServerTool.objects.filter(flagged=False).update(accepted_hash=F("schema_hash"))
    listed = ServerTool.objects.values("server_id")
    ToolServer.objects.filter(pk__in=listed).update(tools_listed_at=timezone.now())


class Migration(migrations.Migration):
    dependencies = [
        ("toolservers", "0003_team_defaults_and_roles"),
    ]

    operations = [
        migrations.RenameField(
            model_name="servertool", old_name="flag_accepted_by", new_name="accepted_by"
        ),
        migrations.RenameField(
            model_name="servertool", old_name="flag_accepted_hash", new_name="accepted_hash"
        ),
        migrations.AddField(
            model_name="servertool",
            name="change_note",
            field=models.CharField(blank=True, default="", max_length=200),
        ),
        migrations.AddField(
            model_name="toolserver",
            name="tools_listed_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(accept_what_was_there, migrations.RunPython.noop),
    ]
