"""Export chat history as JSON Lines (seed 004), one record per message in history order;
with --bundle, a folder or a tar archive that also carries the messages' files."""

import sys
from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from chats.history_bundle import FolderBundle, TarWriter, spooled_history
from chats.jsonl import history_export
from chats.models import Chat


class Command(BaseCommand):
    help = (
        "Write the history of one chat (or --all chats) as UTF-8 JSON Lines, one record per "
        "message in history order, to stdout or to -o FILE; with --bundle PATH, a folder (or a "
        "tar archive when PATH ends in .tar) holding history.jsonl and the files' bytes by "
        "SHA-256. Re-import either with import_chat."
    )

    def add_arguments(self, parser):
        parser.add_argument("chat_key", nargs="?", help="the chat to export, e.g. web:team-room")
        parser.add_argument(
            "--all", dest="all_chats", action="store_true", help="export every chat"
        )
        parser.add_argument("-o", "--output", default="-", help="file to write (default: stdout)")
        parser.add_argument(
            "--bundle",
            help="a new folder, or an archive ending in .tar, for the lines and the files",
        )

    def handle(
        self,
        *args,
        chat_key: str | None,
        all_chats: bool,
        output: str,
        bundle: str | None = None,
        **options,
    ):
        if all_chats == (chat_key is not None):
            raise CommandError("give either a chat_key or --all")
        if all_chats:
            chats = None
        else:
            chats = Chat.objects.filter(chat_key=chat_key)
            if not chats.exists():
                raise CommandError(f"no chat with key {chat_key!r}")

        if bundle:
            if output != "-":
                raise CommandError("give either --output or --bundle")
            count = self._export_bundle(Path(bundle), chats)
            self.stdout.write(f"Exported {count} message{'' if count == 1 else 's'} to {bundle}.")
            return
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

    def _export_bundle(self, path: Path, chats) -> int:
        """The lines and the blobs they name, in a new folder or a new .tar archive."""
        if path.exists() and (path.is_file() or any(path.iterdir())):
            raise CommandError(f"{path} exists and is not an empty folder")
        try:
            if path.suffix != ".tar":
                path.mkdir(parents=True, exist_ok=True)
                folder = FolderBundle(path)
                with open(folder.history_path, "w", encoding="utf-8", newline="\n") as out:
                    return history_export(out=out, chats=chats, bundle=folder)
            lines, forget = spooled_history()
            archive = TarWriter(path)
            try:
                with open(lines, "w", encoding="utf-8", newline="\n") as out:
                    count = history_export(out=out, chats=chats, bundle=archive)
                archive.add_history(lines)
            finally:
                archive.close()
                forget()
            return count
        except OSError as exc:
            raise CommandError(f"cannot write {path}: {exc.strerror or exc}") from exc
