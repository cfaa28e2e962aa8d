"""Messages that already have files name the attachments app in their `carries` metadata, so
the context builder asks for their files (attachments.services.mark_carrying does it for
new files)."""

from django.db import migrations

CARRIES_KEY = "carries"
NAME = "attachments"


def mark(apps, schema_editor):
    Attachment = apps.get_model("attachments", "Attachment")
    Message = apps.get_model("chats", "Message")
    ids = Attachment.objects.values_list("message_id", flat=True).distinct()
    for message in Message.objects.filter(pk__in=list(ids)).only("pk", "metadata"):
        metadata = message.metadata if isinstance(message.metadata, dict) else {}
        names = metadata.get(CARRIES_KEY) or []
        if NAME not in names:
            metadata = {**metadata, CARRIES_KEY: [*names, NAME]}
            Message.objects.filter(pk=message.pk).update(metadata=metadata)


class Migration(migrations.Migration):
    dependencies = [("attachments", "0003_pending_reply_files")]

    operations = [migrations.RunPython(mark, migrations.RunPython.noop)]
