"""Say which language model the agent uses, and whether it is the offline demo model."""

from django.core.management.base import BaseCommand

from chats.agent.llm import get_provider


class Command(BaseCommand):
    help = "Print which language model the agent will use (and a notice for the demo model)."

    def handle(self, *args, **options):
        info = get_provider().info
        if info.name == "none":
            self.stdout.write("Model: none configured. " + info.notice)
            return
        self.stdout.write(f"Model: {info.model} ({info.name}, {info.context_tokens:,} tokens)")
        if info.notice:
            self.stdout.write(info.notice)
