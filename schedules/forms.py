"""The schedule form of the Schedules panel, the edit page and the preview: it only parses
what the browser sends; what is allowed (the timing, the prompt, the limits) is decided by
`schedules.services`, whose ScheduleSpecError messages the form shows next to the field
they name."""

from datetime import datetime

from django import forms
from django.conf import settings

from schedules.models import Schedule
from schedules.services import MAX_PROMPT_CHARS
from schedules.timing import ScheduleSpecError, to_instant, zone

# ScheduleSpecError.field -> the form's field that shows the message.
FIELD_OF = {
    "prompt": "prompt",
    "kind": "kind",
    "cron": "cron",
    "every": "every",
    "at": "at",
    "tz": "timezone",
    "catch_up": "catch_up",
    "mode": "mode",
}
MAX_EVERY_MINUTES = 366 * 24 * 60


class ScheduleForm(forms.Form):
    prompt = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=MAX_PROMPT_CHARS,
        required=False,
        help_text="What the agent is asked at each run; members see it in the chat.",
    )
    kind = forms.ChoiceField(label="When", choices=Schedule.Kind.choices)
    cron = forms.CharField(
        label="Cron expression",
        max_length=255,
        required=False,
        help_text="minute hour day-of-month month day-of-week, e.g. 0 9 * * 1-5",
        widget=forms.TextInput(attrs={"placeholder": "0 9 * * 1-5", "spellcheck": "false"}),
    )
    every = forms.IntegerField(
        label="Every (minutes)", min_value=1, max_value=MAX_EVERY_MINUTES, required=False
    )
    at = forms.CharField(
        label="Once at",
        required=False,
        max_length=32,
        help_text="in the schedule's time zone",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    timezone = forms.CharField(
        label="Time zone",
        max_length=64,
        required=False,
        help_text="an IANA name, e.g. Europe/Berlin",
        widget=forms.TextInput(attrs={"spellcheck": "false", "autocomplete": "off"}),
    )
    catch_up = forms.ChoiceField(
        label="Slots missed while the hub was down", choices=Schedule.CatchUp.choices
    )
    mode = forms.ChoiceField(choices=Schedule.Mode.choices)

    def __init__(self, *args, prompt_editable: bool = True, **kwargs):
        super().__init__(*args, **kwargs)
        if not prompt_editable:
            self.fields["prompt"].disabled = True
            self.fields[
                "prompt"
            ].help_text = (
                "Only the schedule's owner changes what it asks: it is posted in their name."
            )

    @classmethod
    def for_schedule(cls, schedule: Schedule, **kwargs) -> "ScheduleForm":
        at = ""
        if schedule.run_at is not None:
            at = schedule.run_at.astimezone(zone(schedule.timezone)).strftime("%Y-%m-%dT%H:%M")
        initial = {
            "prompt": schedule.prompt,
            "kind": schedule.kind,
            "cron": schedule.cron,
            "every": schedule.interval_minutes,
            "at": at,
            "timezone": schedule.timezone,
            "catch_up": schedule.catch_up,
            "mode": schedule.mode,
        }
        return cls(initial=initial, **kwargs)

    def timing(self) -> dict:
        """The timing arguments of the services (`kind`, `cron`, `interval_minutes`,
        `run_at`, `tz`) from the cleaned data; a one-off time is a wall time in the
        schedule's zone (one that does not exist, in a spring-forward gap, is the first
        instant after it, as for cron). Raises ScheduleSpecError naming the part."""
        data = self.cleaned_data
        kind = data["kind"]
        tz = data.get("timezone") or settings.TIME_ZONE
        run_at = None
        if kind == Schedule.Kind.ONCE:
            text = (data.get("at") or "").strip()
            if not text:
                raise ScheduleSpecError("at", "give the date and time it runs at")
            try:
                wall = datetime.fromisoformat(text)
            except ValueError:
                raise ScheduleSpecError(
                    "at", f"{text!r} is not a date and time (YYYY-MM-DDTHH:MM)"
                ) from None
            if wall.tzinfo is not None:
                raise ScheduleSpecError("at", "give a wall time; its zone is the schedule's")
            run_at = to_instant(wall, zone(tz))
        return {
            "kind": kind,
            "cron": (data.get("cron") or "") if kind == Schedule.Kind.CRON else "",
            "interval_minutes": data.get("every") if kind == Schedule.Kind.INTERVAL else None,
            "run_at": run_at,
            "tz": tz,
        }

    def show_error(self, error: ScheduleSpecError) -> None:
        """Put a refusal of the services next to the field it names."""
        self.add_error(FIELD_OF.get(error.field), str(error))
