"""Staff set model prices here; a saved or deleted price reprices that model's records and
rebuilds its daily sums, so the price applies from its day on. The ledger and the sums are
read-only: they change only through usage.services."""

from django.contrib import admin

from usage.models import ModelPrice, UsageDay, UsageRecord
from usage.services import usage_prices_changed


@admin.register(ModelPrice)
class ModelPriceAdmin(admin.ModelAdmin):
    list_display = ("model", "valid_from", "input_per_million", "output_per_million", "currency")
    list_filter = ("model",)
    search_fields = ("model",)
    fields = ("model", "valid_from", "input_per_million", "output_per_million", "currency", "note")

    def save_model(self, request, obj, form, change):
        previous = None
        if change:
            previous = ModelPrice.objects.filter(pk=obj.pk).values_list("model", flat=True).first()
        super().save_model(request, obj, form, change)
        if previous and previous != obj.model:
            usage_prices_changed(model=previous)
        usage_prices_changed(model=obj.model)

    def delete_model(self, request, obj):
        model = obj.model
        super().delete_model(request, obj)
        usage_prices_changed(model=model)

    def delete_queryset(self, request, queryset):
        models = set(queryset.values_list("model", flat=True))
        super().delete_queryset(request, queryset)
        for model in sorted(models):
            usage_prices_changed(model=model)


class ReadOnly(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnly):
    list_display = (
        "at",
        "kind",
        "model",
        "person",
        "chat",
        "turn",
        "calls",
        "prompt_tokens",
        "completion_tokens",
        "cost",
        "duration_ms",
        "detail",
    )
    list_filter = ("kind", "model")
    raw_id_fields = ("person", "chat", "turn", "review")
    date_hierarchy = "at"


@admin.register(UsageDay)
class UsageDayAdmin(ReadOnly):
    list_display = (
        "day",
        "kind",
        "model",
        "person",
        "chat",
        "calls",
        "prompt_tokens",
        "completion_tokens",
        "cost_nanos",
        "unpriced_tokens",
    )
    list_filter = ("kind", "model")
    raw_id_fields = ("person", "chat")
