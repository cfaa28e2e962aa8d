"""`manage.py knowledge sync NAME PATH [--reader USERNAME ...]` and
`manage.py knowledge enable NAME --chat CHAT_KEY`: the operator's side of team knowledge,
through the same services as the pages (docs/KNOWLEDGE.md)."""

from pathlib import Path

from django.contrib.auth import get_user_model
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management.base import BaseCommand, CommandError

from chats.models import Chat
from knowledge.models import Collection, SyncRun
from knowledge.services import collection_add_readers, collection_turn_on
from knowledge.sync import SyncBusy, collection_for_sync, collection_sync


class Command(BaseCommand):
    help = "Sync a folder into a knowledge collection, or turn a collection on in a chat."

    def add_arguments(self, parser):
        actions = parser.add_subparsers(dest="action", required=True)
        sync = actions.add_parser("sync", help="Sync the folder PATH into the collection NAME.")
        sync.add_argument("name")
        sync.add_argument("path")
        sync.add_argument(
            "--reader",
            action="append",
            default=[],
            metavar="USERNAME",
            help="A person who may read the collection (repeatable).",
        )
        enable = actions.add_parser("enable", help="Turn the collection NAME on in a chat.")
        enable.add_argument("name")
        enable.add_argument("--chat", required=True, metavar="CHAT_KEY")

    def handle(self, *args, **options):
        if options["action"] == "sync":
            return self._sync(options["name"], options["path"], options["reader"])
        return self._enable(options["name"], options["chat"])

    def _people(self, usernames: list[str]) -> list:
        people = []
        for username in usernames:
            person = get_user_model().objects.filter(username=username).first()
            if person is None:
                raise CommandError(f"There is no person called {username!r}.")
            people.append(person)
        return people

    def _sync(self, name: str, path: str, usernames: list[str]) -> None:
        readers = self._people(usernames)
        if not Path(path).is_dir():
            raise CommandError(f"{path} is not a folder.")
        try:
            collection, created = collection_for_sync(name=name, path=path, readers=readers)
        except ValidationError as exc:
            raise CommandError(" ".join(exc.messages)) from exc
        if not created and readers:
            collection_add_readers(collection=collection, people=readers, by=None)
        try:
            report = collection_sync(
                collection=collection, path=path, trigger=SyncRun.Trigger.COMMAND
            )
        except (SyncBusy, FileNotFoundError) as exc:
            raise CommandError(str(exc)) from exc
        counts = ", ".join(f"{value} {key}" for key, value in report.counts.items())
        verb = "Created and synced" if created else "Synced"
        self.stdout.write(f"{verb} {collection.name} (run #{report.run_id}): {counts}.")

    def _enable(self, name: str, chat_key: str) -> None:
        collection = Collection.objects.filter(name=name).first()
        if collection is None:
            raise CommandError(f"There is no collection called {name!r}.")
        chat = Chat.objects.filter(chat_key=chat_key).first()
        if chat is None:
            raise CommandError(f"There is no chat {chat_key!r}.")
        try:
            collection_turn_on(collection=collection, chat=chat, by=None)
        except PermissionDenied as exc:
            raise CommandError(f"{collection.name} cannot be on in {chat_key}: {exc}") from exc
        self.stdout.write(f"{collection.name} is on in {chat_key}.")
