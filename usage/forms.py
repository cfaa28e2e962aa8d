"""The usage page's filter: a range of UTC days (at most USAGE_MAX_RANGE_DAYS), optional
person, chat, model and kind, and the breakdown to show. Defaults: the last 30 days."""

from datetime import timedelta

from django import forms
from django.conf import settings
from django.utils import timezone

from usage.models import Kind
from usage.selectors import GROUPINGS, UsageFilter

DEFAULT_DAYS = 30


class UsageFilterForm(forms.Form):
    start = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    person = forms.IntegerField(required=False, min_value=0, widget=forms.HiddenInput)
    chat = forms.IntegerField(required=False, min_value=1, widget=forms.HiddenInput)
    model = forms.CharField(required=False, max_length=255)
    kind = forms.ChoiceField(required=False, choices=[("", "every kind"), *Kind.choices])
    by = forms.ChoiceField(required=False, choices=[(g, g) for g in GROUPINGS])

    def clean(self):
        data = super().clean()
        today = timezone.now().date()
        end = data.get("end") or today
        start = data.get("start") or end - timedelta(days=DEFAULT_DAYS - 1)
        if start > end:
            raise forms.ValidationError("The range starts after it ends.")
        if (end - start).days + 1 > settings.USAGE_MAX_RANGE_DAYS:
            raise forms.ValidationError(
                f"A range covers at most {settings.USAGE_MAX_RANGE_DAYS} days."
            )
        data["start"], data["end"] = start, end
        data["by"] = data.get("by") or "day"
        return data

    def usage_filter(self) -> UsageFilter:
        data = self.cleaned_data
        return UsageFilter(
            start=data["start"],
            end=data["end"],
            person_id=data.get("person"),
            chat_id=data.get("chat"),
            model=data.get("model") or None,
            kind=data.get("kind") or None,
        )
