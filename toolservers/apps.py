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

        from chats.agent.waiting import register_wait_point
        from chats.signals import turn_finished
        from toolservers.approvals import terminal_approvals

        register_wait_point(terminal_approvals)

        turn_finished.connect(_void_waiting_approvals, dispatch_uid="toolservers.approvals")


def _void_waiting_approvals(sender, turn, status, **kwargs) -> None:
    """A turn that ended while waiting (stopped, superseded) leaves no card open."""
    from chats.models import Turn
    from toolservers.approvals import approvals_void_for_turn

    if status != Turn.Status.COMPLETED:
        approvals_void_for_turn(turn=turn)
