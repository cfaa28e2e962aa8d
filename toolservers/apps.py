from django.apps import AppConfig


class ToolServersConfig(AppConfig):
    name = "toolservers"
    verbose_name = "Tool servers (MCP)"

    def ready(self) -> None:
        from chats.agent.registry import register_prompt_section, register_tool_provider
        from chats.slash_commands import register_slash_command
        from toolservers.commands import tools_slash_command
        from toolservers.provider import tool_server_tools, tool_servers_section

        register_tool_provider(tool_server_tools)
        register_prompt_section(tool_servers_section)
        register_slash_command(tools_slash_command)
