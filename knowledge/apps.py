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
        from chats.work_sources import register_source_readers, register_work_sources
        from knowledge.provenance import collections_behind, readable_collection_ids

        # Memory and skill proposals drawn from a passage carry its collection (issue 35).
        register_work_sources("knowledge", collections_behind)
        register_source_readers("collection", readable_collection_ids)
        signals.connect()
        surface.connect()
