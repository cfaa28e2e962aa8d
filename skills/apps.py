from django.apps import AppConfig
from django.core import checks


class SkillsConfig(AppConfig):
    name = "skills"
    verbose_name = "Skills"

    def ready(self) -> None:
        from chats.agent.registry import register_prompt_section, register_tool_provider
        from skills.prompt import skills_section
        from skills.tools import skill_tools

        register_tool_provider(skill_tools)
        register_prompt_section(skills_section)
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
