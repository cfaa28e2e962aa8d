from django.apps import AppConfig


class SchedulesConfig(AppConfig):
    name = "schedules"
    verbose_name = "Schedules"

    def ready(self) -> None:
        from schedules import receivers

        receivers.connect()
