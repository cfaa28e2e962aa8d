import logging

from django.apps import AppConfig

logger = logging.getLogger(__name__)


class BotsConfig(AppConfig):
    name = "bots"
    verbose_name = "Telegram bridge"

    def ready(self) -> None:
        try:
            from memory.signals import proposal_created
        except ImportError:  # the memory app has no proposals yet: nothing to review
            logger.debug("memory.signals.proposal_created missing: no Telegram review buttons")
            return
        from bots.memory_reviews import on_proposal_created

        proposal_created.connect(on_proposal_created, dispatch_uid="bots-memory-review-buttons")
