from django.apps import AppConfig


class KnowledgeConfig(AppConfig):
    name = "knowledge"
    verbose_name = "Team knowledge"

    def ready(self) -> None:
        from chats.agent.registry import register_prompt_section, register_tool_provider
        from knowledge import signals, surface
        from knowledge.prompt import knowledge_section
        from knowledge.tools import knowledge_tools

        register_tool_provider(knowledge_tools)
        register_prompt_section(knowledge_section)
        signals.connect()
        surface.connect()
