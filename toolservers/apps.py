from django.apps import AppConfig


class ToolServersConfig(AppConfig):
    name = "toolservers"
    verbose_name = "Tool servers (MCP)"

    def ready(self) -> None:
        from chats.agent.registry import register_tool_provider
        from toolservers.provider import tool_server_tools

        register_tool_provider(tool_server_tools)
