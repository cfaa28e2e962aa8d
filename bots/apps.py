import logging

from django.apps import AppConfig

logger = logging.getLogger(__name__)


class BotsConfig(AppConfig):
    name = "bots"
    verbose_name = "Telegram bridge"

    def ready(self) -> None:
        from bots.callbacks import register_callback_handler
        from bots.channel import delivery_channel
        from bots.notices import on_notice_posted
        from chats.deliveries import register_delivery_channel
        from chats.signals import notice_posted

        # Replies no Telegram update asked for (scheduled runs) and words to one person.
        register_delivery_channel(delivery_channel())
        # A held message's turn (its files read, its album complete) is answered like any.
        from bots.services import reply_for_held_turn
        from chats.signals import held_turn_requested

        held_turn_requested.connect(reply_for_held_turn, dispatch_uid="bots-held-turn-replies")
        # Whether a hub member is still in a Telegram chat (left? banned?): chat_may_post.
        from bots.post_rights import telegram_may_post
        from chats.posting import register_post_check

        register_post_check("telegram", telegram_may_post)
        # Notices in a Telegram chat's history (an expired proposal, say) reach Telegram too.
        notice_posted.connect(on_notice_posted, dispatch_uid="bots-telegram-notices")
        # Memory and skills are optional neighbours: each one present gets review buttons.
        try:
            from memory.signals import proposal_created as memory_proposal_created
        except ImportError:  # the memory app has no proposals yet: nothing to review
            logger.debug("memory.signals.proposal_created missing: no Telegram memory buttons")
        else:
            from bots import memory_reviews

            memory_proposal_created.connect(
                memory_reviews.on_proposal_created, dispatch_uid="bots-memory-review-buttons"
            )
            register_callback_handler("mem", memory_reviews.callback_query_apply)
        try:
            from skills.signals import proposal_created as skill_proposal_created
        except ImportError:  # no skills app: nothing to review
            logger.debug("skills.signals.proposal_created missing: no Telegram skill buttons")
        else:
            from bots import skill_reviews

            skill_proposal_created.connect(
                skill_reviews.on_proposal_created, dispatch_uid="bots-skill-review-buttons"
            )
            register_callback_handler("skl", skill_reviews.callback_query_apply)
        try:
            from schedules.signals import proposal_created as schedule_proposal_created
        except ImportError:  # no schedules app: nothing to approve
            logger.debug("schedules.signals.proposal_created missing: no schedule buttons")
        else:
            from bots import schedule_reviews

            schedule_proposal_created.connect(
                schedule_reviews.on_proposal_created, dispatch_uid="bots-schedule-review-buttons"
            )
            register_callback_handler("sch", schedule_reviews.callback_query_apply)
        # Tool calls waiting for a decider: cards with buttons in the deciders' private chats.
        from bots.tool_approvals import (
            callback_query_apply,
            on_approval_decided,
            on_approval_requested,
        )
        from toolservers.approvals import approval_decided, approval_requested

        approval_requested.connect(on_approval_requested, dispatch_uid="bots-tool-approval-cards")
        approval_decided.connect(on_approval_decided, dispatch_uid="bots-tool-approval-outcomes")
        register_callback_handler("tool", callback_query_apply)
