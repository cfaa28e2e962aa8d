"""Forms of the memory pages: they validate what reviewers send; memory.services decides.

Every decision names the revision of the proposal the reviewer was shown, so a proposal
rewritten in between is refused instead of approved unseen."""

from django import forms

MAX_EDIT_CHARS = 4000
MAX_REVISION = 2_000_000_000


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    revision = forms.IntegerField(min_value=1, max_value=MAX_REVISION, widget=forms.HiddenInput)
    # Present only when the reviewer edited the text before approving.
    text = forms.CharField(required=False, strip=True, max_length=MAX_EDIT_CHARS)


class EntryIdsField(forms.Field):
    """The ticked proposals as (id, revision) pairs (`entry=3:1&entry=7:4`), deduplicated by
    id, in order."""

    widget = forms.MultipleHiddenInput

    def to_python(self, value) -> list[tuple[int, int]]:
        picked: list[tuple[int, int]] = []
        for raw in value or []:
            try:
                number, revision = (int(part) for part in str(raw).split(":"))
            except (TypeError, ValueError):
                raise forms.ValidationError("Unknown proposal.") from None
            if not (number > 0 and 0 < revision <= MAX_REVISION):
                raise forms.ValidationError("Unknown proposal.")
            if number not in {seen for seen, _ in picked}:
                picked.append((number, revision))
        return picked

    def validate(self, value) -> None:
        if not value and self.required:
            raise forms.ValidationError(NOTHING_SELECTED)


NOTHING_SELECTED = "Select at least one proposal first."


class BulkDecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "Approve"), ("reject", "Reject")])
    # The page's other sections (skill changes) tick boxes of their own: none here is fine.
    entry = EntryIdsField(required=False)
