"""Forms of the memory pages: they validate what reviewers send; memory.services decides."""

from django import forms

MAX_EDIT_CHARS = 4000


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    # Present only when the reviewer edited the text before approving.
    text = forms.CharField(required=False, strip=True, max_length=MAX_EDIT_CHARS)


class EntryIdsField(forms.Field):
    """The ids of the ticked proposals (`entry=3&entry=7`), deduplicated, in order."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value) -> list[int]:
        ids: list[int] = []
        for raw in value or []:
            try:
                number = int(raw)
            except (TypeError, ValueError):
                raise forms.ValidationError("Unknown proposal.") from None
            if number > 0 and number not in ids:
                ids.append(number)
        return ids

    def validate(self, value) -> None:
        if not value:
            raise forms.ValidationError("Select at least one proposal first.")


class BulkDecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    entry = EntryIdsField()
