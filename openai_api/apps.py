from django.apps import AppConfig


class OpenAIApiConfig(AppConfig):
    name = "openai_api"
    verbose_name = "OpenAI-compatible endpoint and personal keys"

    def ready(self) -> None:
        from chats.agent.registry import register_prompt_section
        from chats.signals import turn_finished
        from openai_api.prompt import client_note_section

        register_prompt_section(client_note_section)
        turn_finished.connect(_record_reply, dispatch_uid="openai-record-reply")


def _record_reply(sender, turn, status, **kwargs) -> None:
    from openai_api.services import conversation_record_reply

    conversation_record_reply(turn=turn)
