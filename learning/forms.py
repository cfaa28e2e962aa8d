"""The form of a chat's learning settings: it validates what owners and admins send;
`learning.services.chat_learning_settings_update` decides who may and writes it."""

from django import forms
from django.conf import settings

from learning.services import MAX_INTERVAL


def _interval_field(label: str) -> forms.IntegerField:
    return forms.IntegerField(
        label=label,
        required=False,
        min_value=0,
        max_value=MAX_INTERVAL,
        error_messages={
            "invalid": "Enter a whole number, or leave it empty for the site default.",
            "min_value": "Enter 0 or more (0 turns these reviews off).",
            "max_value": f"Enter at most {MAX_INTERVAL:,}.",
        },
        widget=forms.NumberInput(attrs={"min": 0, "max": MAX_INTERVAL, "step": 1}),
    )


class ChatLearningSettingsForm(forms.Form):
    """A chat's review intervals (empty: the site default, 0: off) and quiet notice."""

    memory_interval = _interval_field("Memory review every")
    skill_interval = _interval_field("Skill review every")
    review_notice = forms.BooleanField(
        label="Quiet notice in the chat after a review that proposed something",
        required=False,
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        memory_default = settings.LEARNING_MEMORY_REVIEW_INTERVAL
        skill_default = settings.LEARNING_SKILL_REVIEW_INTERVAL
        minimum = settings.LEARNING_MIN_INTERVAL
        self.fields[
            "memory_interval"
        ].help_text = (
            f"user turns, at least {minimum}; empty: the site default ({memory_default}); 0: off"
        )
        self.fields["skill_interval"].help_text = (
            f"tool-loop iterations, at least {minimum}; empty: the site default "
            f"({skill_default}); 0: off"
        )
        self.fields["memory_interval"].widget.attrs["placeholder"] = f"default ({memory_default})"
        self.fields["skill_interval"].widget.attrs["placeholder"] = f"default ({skill_default})"
