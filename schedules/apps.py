import logging

from django.apps import AppConfig

logger = logging.getLogger(__name__)


class SchedulesConfig(AppConfig):
    name = "schedules"
    verbose_name = "Schedules"

    def ready(self) -> None:
        from chats.agent.registry import register_history_scope, register_tool_provider
        from chats.approvals import register_approval_section
        from chats.slash_commands import register_slash_command
        from schedules import receivers
        from schedules.agent_tool import schedule_tools
        from schedules.approval_section import approval_section
        from schedules.history import isolated_history
        from schedules.slash_command import schedules_slash_command

        receivers.connect()
        register_slash_command(schedules_slash_command)
        register_tool_provider(schedule_tools)
        register_approval_section(approval_section)
        # An isolated run's turn sees only its schedule's earlier runs.
        register_history_scope(isolated_history)
        try:
            from usage.services import schedule_owner_lookup_install
        except ImportError:  # no usage ledger: nobody is charged for runs
            logger.debug("usage.services missing: scheduled runs are attributed to nobody")
        else:
            # A run's spend is its schedule owner's (usage never imports schedules).
            schedule_owner_lookup_install(schedule_owner_id)
        try:
            from learning.curator import referenced_skills_register
        except ImportError:  # no curator: nothing marks skills stale
            logger.debug("learning.curator missing: schedules reference no skills")
        else:
            from schedules.skills import skills_in_schedules

            # Skills that enabled schedules name are never marked stale nor archived.
            referenced_skills_register("schedules", skills_in_schedules)


def schedule_owner_id(schedule_id) -> int | None:
    """The owner of schedule `schedule_id` (None when it is gone)."""
    from schedules.models import Schedule

    return Schedule.objects.filter(pk=schedule_id).values_list("owner_id", flat=True).first()
