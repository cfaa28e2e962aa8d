from django.apps import AppConfig
from django.core import checks


class MemoryConfig(AppConfig):
    name = "memory"
    verbose_name = "Team memory"

    def ready(self) -> None:
        from chats.agent.registry import register_prompt_section, register_tool_provider
        from chats.approvals import ApprovalSection, register_approval_section
        from chats.signals import actor_linked
        from memory.prompt import memory_section
        from memory.selectors import memory_pending_count
        from memory.tools import memory_tools

        register_tool_provider(memory_tools)
        register_prompt_section(memory_section)
        # The Approvals page renders memory's own list; this makes the badge count it.
        register_approval_section(
            ApprovalSection(name="memory", count=memory_pending_count, order=10)
        )
        actor_linked.connect(_follow_link, dispatch_uid="memory-follow-actor-link")
        checks.register(_check_approval_settings, checks.Tags.compatibility)


def _follow_link(sender, actor, person, **kwargs) -> None:
    from memory.services import memory_adopt_actor_book

    memory_adopt_actor_book(actor=actor, person=person)


def _check_approval_settings(app_configs=None, **kwargs):
    from memory.policy import APPROVAL_CHOICES, approval_policy

    errors = []
    for scope, choices in APPROVAL_CHOICES.items():
        value = approval_policy(scope)
        if value not in choices:
            errors.append(
                checks.Error(
                    f"MEMORY_APPROVAL_{scope.upper()}={value!r} is not one of {', '.join(choices)}",
                    id="memory.E001",
                )
            )
    return errors
