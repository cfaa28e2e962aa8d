from django.apps import AppConfig


class BudgetsConfig(AppConfig):
    name = "budgets"
    verbose_name = "Budgets"

    def ready(self) -> None:
        from budgets import receivers
        from budgets.services import budget_review_gate, budget_turn_gate
        from chats.agent.registry import register_turn_gate
        from learning.gates import register_review_gate

        register_turn_gate(budget_turn_gate)
        register_review_gate(budget_review_gate)
        receivers.connect()
