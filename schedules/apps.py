from django.apps import AppConfig


class SchedulesConfig(AppConfig):
    name = "schedules"
    verbose_name = "Schedules"

    def ready(self) -> None:
        from chats.slash_commands import register_slash_command
        from schedules import receivers
        from schedules.slash_command import schedules_slash_command

        receivers.connect()
        register_slash_command(schedules_slash_command)
