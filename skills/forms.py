"""Forms of the skills pages: they validate what people send; skills.reviews decides.

Version numbers are bounded before they reach a query (PostgreSQL's integer column would
turn a huge number into a server error). A rollback names the version the page showed as
current (`shown_version`), so a page left open while the skill moved on decides nothing.
"""

from django import forms

MAX_NUMBER = 2_000_000_000
MAX_QUERY_CHARS = 200

STATUS_CHOICES = [
    ("", "Active and stale"),
    ("active", "Active"),
    ("stale", "Stale"),
    ("archived", "Archived"),
    ("all", "All"),
]


def version_number(**kwargs) -> forms.IntegerField:
    return forms.IntegerField(min_value=1, max_value=MAX_NUMBER, **kwargs)


class LibraryFilterForm(forms.Form):
    """The library's search box and filters (all optional; GET)."""

    q = forms.CharField(required=False, strip=True, max_length=MAX_QUERY_CHARS)
    category = forms.ChoiceField(required=False)
    status = forms.ChoiceField(required=False, choices=STATUS_CHOICES)

    def __init__(self, data=None, *, categories: list[str]):
        super().__init__(data)
        self.fields["category"].choices = [("", "All categories")] + [
            (name, name) for name in categories
        ]

    def filters(self) -> dict:
        """The valid filters; a field that failed validation counts as not set."""
        cleaned = getattr(self, "cleaned_data", {})
        return {
            "query": cleaned.get("q") or "",
            "category": cleaned.get("category") or "",
            "status": cleaned.get("status") or "",
        }


class VersionForm(forms.Form):
    """`?version=N` on the skill page."""

    version = version_number(required=False)


class DiffForm(forms.Form):
    """The two versions to compare (`?a=N&b=M`); missing ones take the page's defaults."""

    a = version_number(required=False, label="From version")
    b = version_number(required=False, label="To version")


class RollbackForm(forms.Form):
    # The reply shows the current version (the new one, or the one that made this stale),
    # so, unlike pin and archive, a rollback needs no `view`.
    to_version = version_number()
    shown_version = version_number(widget=forms.HiddenInput)


class PinForm(forms.Form):
    pinned = forms.TypedChoiceField(
        choices=[("1", "Pin"), ("0", "Unpin")], coerce=lambda v: v == "1"
    )
    view = version_number(required=False, widget=forms.HiddenInput)


class StatusForm(forms.Form):
    archived = forms.TypedChoiceField(
        choices=[("1", "Archive"), ("0", "Restore")], coerce=lambda v: v == "1"
    )
    view = version_number(required=False, widget=forms.HiddenInput)


class PromoteForm(forms.Form):
    # The version the page showed as current: a promotion is of what the reviewer read.
    shown_version = version_number(widget=forms.HiddenInput)
    view = version_number(required=False, widget=forms.HiddenInput)
