from django.apps import AppConfig


class LearningConfig(AppConfig):
    name = "learning"
    verbose_name = "Learning loop"

    def ready(self) -> None:
        from chats.signals import turn_finished

        turn_finished.connect(_count_turn, dispatch_uid="learning-count-turn")

        from learning.curator import skill_stale_note
        from skills.views import register_skill_page_note

        register_skill_page_note("curator", skill_stale_note)


def _count_turn(sender, turn, status, **kwargs) -> None:
    from learning.services import learning_turn_finished

    learning_turn_finished(turn=turn, status=status)
