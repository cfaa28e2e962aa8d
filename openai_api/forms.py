from django import forms
from django.utils import timezone


class PersonalKeyForm(forms.Form):
    name = forms.CharField(max_length=100, help_text="What the key is for, e.g. “Open WebUI”.")
    expires_at = forms.DateTimeField(
        required=False,
        label="Expires",
        help_text="Optional (UTC, e.g. 2027-01-31 18:00). Leave empty for a key that lasts "
        "until you revoke it.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )

    def clean_expires_at(self):
        value = self.cleaned_data.get("expires_at")
        if value is not None and value <= timezone.now():
            raise forms.ValidationError("The expiry must be in the future.")
        return value
