"""`manage.py run_telegram_bot`: the Telegram bridge (long polling by default)."""

import asyncio
import logging

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from telegram.error import InvalidToken

from bots.bridge import TelegramBridge


class Command(BaseCommand):
    help = (
        "Run the Telegram bridge: receive updates (long polling, or the webhook view), "
        "store them, and stream the agent's replies back. Needs TELEGRAM_BOT_TOKEN."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--mode",
            choices=["polling", "webhook"],
            default=None,
            help="polling (getUpdates) or webhook (updates arrive at /telegram/webhook); "
            "default TELEGRAM_MODE",
        )

    def handle(self, *args, mode=None, **options):
        """Runs until Ctrl-C / SIGTERM; a restart continues from the stored offset and outbox."""
        if not settings.TELEGRAM_BOT_TOKEN:
            raise CommandError("TELEGRAM_BOT_TOKEN is not set: there is no bot to run.")
        mode = mode or settings.TELEGRAM_MODE
        if mode not in ("polling", "webhook"):
            raise CommandError(f"TELEGRAM_MODE must be polling or webhook, not {mode!r}")
        if mode == "webhook" and not (
            settings.TELEGRAM_WEBHOOK_URL and settings.TELEGRAM_WEBHOOK_SECRET
        ):
            raise CommandError(
                "webhook mode needs TELEGRAM_WEBHOOK_URL and TELEGRAM_WEBHOOK_SECRET"
            )
        logging.getLogger("httpx").setLevel(logging.WARNING)
        try:
            asyncio.run(TelegramBridge(mode=mode).run())
        except InvalidToken as exc:
            raise CommandError(f"Telegram refused the token: {exc}") from exc
