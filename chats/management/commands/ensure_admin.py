"""Create the first admin login on first run and print how to log in."""

import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = (
        "Create the superuser 'admin' with a random password if no superuser exists, "
        "and print the login while that first password is still valid."
    )

    def add_arguments(self, parser):
        parser.add_argument("--username", default="admin")

    def handle(self, *args, username: str, **options):
        user_model = get_user_model()
        password_file = Path(settings.VAR_DIR) / "initial_admin_password"
        if not user_model.objects.filter(is_superuser=True).exists():
            password = secrets.token_urlsafe(12)
            user_model.objects.create_superuser(username=username, email="", password=password)
            password_file.parent.mkdir(parents=True, exist_ok=True)
            password_file.write_text(password)
            password_file.chmod(0o600)
            self.stdout.write(f"Created the admin login: {username} / {password}")
            return
        user = user_model.objects.filter(username=username, is_superuser=True).first()
        stored = password_file.read_text().strip() if password_file.exists() else ""
        if user is not None and stored and user.check_password(stored):
            self.stdout.write(f"Log in as: {username} / {stored}")
        else:
            self.stdout.write(
                "Log in with your admin account (reset a password with "
                "`.venv/bin/python manage.py changepassword <username>`)."
            )
