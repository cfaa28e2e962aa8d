"""Logging filters: keep `make run`'s console about what people do, not routine upkeep."""

import logging

# Periodic tasks whose routine runs are not news: what they change, they log at WARNING.
ROUTINE_TASKS = ("chats.tasks.sweep_turns", "toolservers.tasks.expire_approvals")


class QuietRoutineTasks(logging.Filter):
    """Drops Celery's INFO lines (sent, received, succeeded) about routine periodic tasks,
    which would otherwise print four lines every sweep interval."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno > logging.INFO:
            return True
        message = record.getMessage()
        return not any(task in message for task in ROUTINE_TASKS)
