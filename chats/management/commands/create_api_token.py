"""Create an API token (or with --personal a personal key) for a person and print it once
(only the token goes to stdout)."""

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from chats.models import ApiToken
from chats.services import api_token_create


class Command(BaseCommand):
    help = (
        "Create an HTTP API token for <username> and print the raw token on stdout "
        "(e.g. TOKEN=$(manage.py create_api_token alice)). It is shown only once. With "
        "--personal, a personal key for the OpenAI-compatible /v1 endpoints instead."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="a label to recognise the token by")
        parser.add_argument(
            "--personal",
            action="store_true",
            help="a personal key: speaks as the person on /v1 (OpenAI-compatible), not on /api/v1",
        )

    def handle(self, *args, username: str, name: str, personal: bool = False, **options):
        """Prints exactly one line on stdout, the raw token; errors for unknown/inactive people."""
        person = get_user_model().objects.filter(username=username).first()
        if person is None:
            raise CommandError(f"No person with username {username!r}.")
        if not person.is_active:
            raise CommandError(f"{username!r} is inactive; the API refuses their tokens.")
        kind = ApiToken.Kind.PERSONAL if personal else ApiToken.Kind.INTEGRATION
        token, raw = api_token_create(person=person, name=name, kind=kind)
        self.stdout.write(raw)
        what = "personal key" if personal else "API token"
        self.stderr.write(
            f"Created {what} {token.prefix}… for {username}. "
            "Store it now: it cannot be shown again."
        )
