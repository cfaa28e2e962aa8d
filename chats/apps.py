from django.apps import AppConfig


class ChatsConfig(AppConfig):
    name = "chats"
    verbose_name = "Chats and history"

    def ready(self) -> None:
        from chats.agent.builtin_tools import builtin_tools
        from chats.agent.registry import register_tool_provider

        register_tool_provider(builtin_tools)

        from chats import receivers

        receivers.connect()

        from chats.agent.runner import turn_runner_install
        from chats.celery_runner import CeleryTurnRunner

        # Queued turns go to the Celery workers; turns.py itself knows nothing of Celery.
        turn_runner_install(CeleryTurnRunner())
