from django.apps import AppConfig
from django.core import checks


class SkillsConfig(AppConfig):
    name = "skills"
    verbose_name = "Skills"

    def ready(self) -> None:
        from chats.agent.registry import register_prompt_section, register_tool_provider
        from chats.approvals import register_approval_section
        from chats.slash_commands import register_slash_command
        from skills.approvals import approval_section
        from skills.commands import skills_slash_command
        from skills.prompt import skills_section
        from skills.tools import skill_tools

        register_tool_provider(skill_tools)
        register_prompt_section(skills_section)
        register_approval_section(approval_section)
        register_slash_command(skills_slash_command)
        checks.register(_check_approval_setting, checks.Tags.compatibility)


def _check_approval_setting(app_configs=None, **kwargs):
    from skills.policy import APPROVAL_CHOICES, approval_policy

    value = approval_policy()
    if value in APPROVAL_CHOICES:
        return []
    return [
        checks.Error(
            f"SKILLS_APPROVAL={value!r} is not one of {', '.join(APPROVAL_CHOICES)}",
            id="skills.E001",
        )
    ]
