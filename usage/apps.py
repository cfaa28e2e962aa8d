from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "usage"
    verbose_name = "Usage and cost"

    def ready(self) -> None:
        from usage import receivers

        receivers.connect()
