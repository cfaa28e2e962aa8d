"""Create an API token for a person and print it once (only the token goes to stdout)."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from chats.services import api_token_create


class Command(BaseCommand):
    help = (
        "Create an HTTP API token for <username> and print the raw token on stdout "
        "(e.g. TOKEN=$(manage.py create_api_token alice)). It is shown only once."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label to recognise the token by")

    def handle(self, *args, username: str, name: str, **options):
        """Prints exactly one line on stdout, the raw token; errors for unknown/inactive people."""
        person = get_user_model().objects.filter(username=username).first()
        if person is None:
            raise CommandError(f"No person with username {username!r}.")
        if not person.is_active:
            raise CommandError(f"{username!r} is inactive; the API refuses their tokens.")
        token, raw = api_token_create(person=person, name=name)
        self.stdout.write(raw)
        self.stderr.write(
            f"Created API token {token.prefix}… for {username}. "
            "Store it now: it cannot be shown again."
        )
