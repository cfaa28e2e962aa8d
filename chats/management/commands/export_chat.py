"""Export chat history as JSON Lines (seed 004), one record per message in history order."""

import sys

from django.core.management.base import BaseCommand, CommandError

from chats.jsonl import history_export
from chats.models import Chat


class Command(BaseCommand):
    help = (
        "Write the history of one chat (or --all chats) as UTF-8 JSON Lines, one record per "
        "message in history order, to stdout or to -o FILE. Re-import with import_chat."
    )

    def add_arguments(self, parser):
        parser.add_argument("chat_key", nargs="?", help="the chat to export, e.g. web:team-room")
        parser.add_argument(
            "--all", dest="all_chats", action="store_true", help="export every chat"
        )
        parser.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")

    def handle(self, *args, chat_key: str | None, all_chats: bool, output: str, **options):
        if all_chats == (chat_key is not None):
            raise CommandError("give either a chat_key or --all")
        if all_chats:
            chats = None
        else:
            chats = Chat.objects.filter(chat_key=chat_key)
            if not chats.exists():
                raise CommandError(f"no chat with key {chat_key!r}")

        if output == "-":
            if getattr(self.stdout, "_out", None) is sys.stdout and hasattr(
                sys.stdout, "reconfigure"
            ):
                sys.stdout.reconfigure(encoding="utf-8")
            count = history_export(out=self.stdout, chats=chats)
            self.stderr.write(
                f"Exported {count} message{'' if count == 1 else 's'}.", style_func=str
            )
            return
        try:
            with open(output, "w", encoding="utf-8", newline="\n") as out:
                count = history_export(out=out, chats=chats)
        except OSError as exc:
            raise CommandError(f"cannot write {output}: {exc.strerror or exc}") from exc
        self.stdout.write(f"Exported {count} message{'' if count == 1 else 's'} to {output}.")
