from django.apps import AppConfig


class OperationsConfig(AppConfig):
    name = "operations"
    verbose_name = "Operations"

    def ready(self) -> None:
        from operations import receivers
        from operations.selectors import heartbeat_latest
        from operations.services import heartbeat_beat
        from schedules.heartbeat import heartbeat_store_install

        receivers.connect()
        # The schedules dispatcher beats through the hub's heartbeats (schedules never
        # imports operations: operations reads schedules for readiness and figures).
        heartbeat_store_install(beat=heartbeat_beat, latest=heartbeat_latest)
