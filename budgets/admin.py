"""Staff set budgets here (the admin is for staff only; the model permissions decide which
staff). Saving records who set the budget: the answer to a person over it names them. The
warnings made (budgets.warnings) are listed, read only; deleting one lets it be told again."""

from django.contrib import admin

from budgets.models import Budget, BudgetWarning
from budgets.services import budget_save


@admin.register(Budget)
class BudgetAdmin(admin.ModelAdmin):
    list_display = ("__str__", "scope", "monthly_tokens", "monthly_cost", "set_by", "updated_at")
    list_filter = ("scope",)
    fields = ("scope", "person", "chat", "monthly_tokens", "monthly_cost", "set_by", "updated_at")
    readonly_fields = ("set_by", "updated_at")
    raw_id_fields = ("person", "chat")

    def save_model(self, request, obj, form, change):
        budget_save(budget=obj, by=request.user)


@admin.register(BudgetWarning)
class BudgetWarningAdmin(admin.ModelAdmin):
    """The warnings made (read only): which budget, for whom, which month and level."""

    list_display = ("budget", "person", "month", "level", "used", "told", "created_at")
    list_filter = ("level", "month")
    raw_id_fields = ("budget", "person")

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False
