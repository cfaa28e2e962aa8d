"""The web surfaces of schedules: a chat's Schedules panel, "My schedules", the edit page,
the live preview of fire times and the time-zone setting.

Who sees what (docs/SECURITY.md, "Schedules"): a chat's schedules and their run history are
shown to its members and to staff (as the chat's Tools page and the admin are); anyone else
gets the 404 of a missing chat or schedule, so their existence never leaks. A schedule's
owner also sees it on "My schedules" after losing access to its chat, without its run
history. Every change goes through `schedules.services`, which checks again who may: its
owner, the chat's owners and admins, and staff (another member gets a 403); only its owner
changes the prompt. Times are shown in the schedule's zone and in the viewer's own
(`PersonPreference`, default TIME_ZONE).
"""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from chats.models import Chat
from chats.selectors import chat_for_person, chat_may_post, chat_still_readable
from schedules.forms import ScheduleForm
from schedules.models import Schedule, ScheduleRun
from schedules.selectors import (
    person_timezone,
    schedule_description,
    schedule_next_fire_times,
    schedule_recent_runs,
    scheduler_status,
    schedules_of_chat,
    schedules_owned_by,
    timing_preview,
)
from schedules.services import (
    manageable_ids,
    may_manage,
    person_timezone_set,
    schedule_create,
    schedule_delete,
    schedule_pause,
    schedule_resume,
    schedule_run_now,
    schedule_update,
)
from schedules.timing import ScheduleSpecError

RUNS_SHOWN = 10


def _is_staff(person) -> bool:
    return person.is_active and person.is_staff


def _chat_or_404(request: HttpRequest, chat_key: str) -> Chat:
    """The chat if the viewer may see its schedules (a member, or staff); else the 404 of a
    missing chat."""
    chat = chat_for_person(request.user, chat_key)
    if chat is None and _is_staff(request.user):
        chat = Chat.objects.filter(chat_key=chat_key).first()
    if chat is None:
        raise Http404("No such chat.")
    return chat


def _schedule_or_404(request: HttpRequest, schedule_id: int) -> tuple[Schedule, bool]:
    """The schedule and whether the viewer reads its chat (a member, or staff); its owner
    who lost access still reaches it (to delete it). Anyone else: 404."""
    person = request.user
    schedule = Schedule.objects.select_related("chat", "owner").filter(pk=schedule_id).first()
    if schedule is None or not person.is_active:
        raise Http404("No such schedule.")
    reads = _is_staff(person) or chat_still_readable(person.pk, schedule.chat_id)
    if not reads and schedule.owner_id != person.pk:
        raise Http404("No such schedule.")
    return schedule, reads


def _entries(person, schedules, *, readable=None) -> list[dict]:
    """What the pages show of each schedule: its description, next five slots, whether the
    viewer may change it, and (where the viewer reads its chat) its newest runs."""
    schedules = list(schedules)
    shown = [s.pk for s in schedules if readable is None or readable(s)]
    runs = schedule_recent_runs(shown, RUNS_SHOWN) if shown else {}
    managed = manageable_ids(person, schedules) if schedules else set()
    return [
        {
            "schedule": s,
            "description": schedule_description(s),
            "next_times": schedule_next_fire_times(s),
            "may_manage": s.pk in managed,
            "reads_chat": s.pk in runs,
            "runs": runs.get(s.pk, []),
        }
        for s in schedules
    ]


def _common(request: HttpRequest) -> dict:
    return {"viewer_tz": person_timezone(request.user), "scheduler": scheduler_status()}


def _panel(request: HttpRequest, chat: Chat, form: ScheduleForm, status: int = 200):
    may_post = chat_may_post(request.user, chat)
    context = _common(request) | {
        "chat": chat,
        "entries": _entries(request.user, schedules_of_chat(chat)),
        "form": form,
        "can_create": bool(may_post),
        "post_refusal": may_post.reason,
        "back": "chat",
    }
    return render(request, "schedules/chat_schedules.html", context, status=status)


@login_required
@require_http_methods(["GET", "POST"])
def chat_schedules(request: HttpRequest, chat_key: str) -> HttpResponse:
    """A chat's schedules with their next fire times and run history, for its members (and
    staff); a POST creates one owned by the viewer, who must be a member (the services
    refuse anyone else)."""
    chat = _chat_or_404(request, chat_key)
    if request.method == "GET":
        initial = {"kind": "cron", "timezone": person_timezone(request.user)}
        return _panel(request, chat, ScheduleForm(initial=initial))
    form = ScheduleForm(request.POST)
    if not form.is_valid():
        return _panel(request, chat, form, status=400)
    data = form.cleaned_data
    try:
        schedule = schedule_create(
            owner=request.user,
            chat=chat,
            prompt=data["prompt"],
            catch_up=data["catch_up"],
            mode=data["mode"],
            **form.timing(),
        )
    except ScheduleSpecError as refusal:
        form.show_error(refusal)
        return _panel(request, chat, form, status=400)
    messages.success(request, f"Schedule #{schedule.pk} created: {schedule_description(schedule)}.")
    return _back(request, schedule)


@login_required
@require_GET
def my_schedules(request: HttpRequest) -> HttpResponse:
    """Every schedule the viewer owns, across chats, with the same actions."""
    owned = schedules_owned_by(request.user)
    context = _common(request) | {
        "entries": _entries(request.user, owned, readable=lambda s: s.chat_readable),
        "back": "mine",
    }
    return render(request, "schedules/mine.html", context)


@login_required
@require_GET
def preview(request: HttpRequest) -> HttpResponse:
    """The readable description and next five fire times of the timing in the form, in the
    schedule's zone and the viewer's, or the message naming what is wrong (htmx, as the
    person types). Pure computation; nothing is stored."""
    form = ScheduleForm(request.GET)
    context = {"viewer_tz": person_timezone(request.user)}
    kind_field = {"cron": "cron", "interval": "every", "once": "at"}.get(request.GET.get("kind"))
    if kind_field and not request.GET.get(kind_field, "").strip():
        pass  # nothing typed yet: the hint, not an error
    elif not form.is_valid():
        timing_fields = ("kind", "cron", "every", "at", "timezone")
        errors = [
            f"{form.fields[name].label or name}: {form.errors[name][0]}"
            for name in timing_fields
            if name in form.errors
        ]
        context["error"] = errors[0] if errors else ""
    else:
        try:
            timing = form.timing()
            context["description"], context["times"] = timing_preview(**timing)
            context["tz"] = timing["tz"]
        except ScheduleSpecError as refusal:
            context["error"] = str(refusal)
    return render(request, "schedules/preview.html", context)


def _back(request: HttpRequest, schedule: Schedule) -> HttpResponse:
    if request.POST.get("back") == "mine":
        return redirect("my_schedules")
    panel = reverse("chat_schedules", args=[schedule.chat.chat_key])
    return redirect(f"{panel}#schedule-{schedule.pk}")


@login_required
@require_http_methods(["GET", "POST"])
def schedule_edit(request: HttpRequest, schedule_id: int) -> HttpResponse:
    """Change a schedule's prompt (its owner only), timing, zone, catch-up or mode; for
    those who may manage it (other readers 403, anyone else 404)."""
    schedule, reads = _schedule_or_404(request, schedule_id)
    if not reads or not may_manage(request.user, schedule):
        raise PermissionDenied("Only its owner, the chat's admins and staff change a schedule.")
    is_owner = schedule.owner_id == request.user.pk
    status = 200
    if request.method == "POST":
        form = ScheduleForm(request.POST, prompt_editable=is_owner)
        if form.is_valid():
            data = form.cleaned_data
            try:
                schedule_update(
                    schedule=schedule,
                    by=request.user,
                    prompt=data["prompt"] if is_owner else schedule.prompt,
                    catch_up=data["catch_up"],
                    mode=data["mode"],
                    **form.timing(),
                )
            except ScheduleSpecError as refusal:
                form.show_error(refusal)
            else:
                messages.success(request, f"Schedule #{schedule.pk} saved.")
                return _back(request, schedule)
        status = 400
        schedule.refresh_from_db()
    else:
        form = ScheduleForm.for_schedule(schedule, prompt_editable=is_owner)
    context = _common(request) | {
        "schedule": schedule,
        "form": form,
        "back": "mine" if "mine" in (request.GET.get("back"), request.POST.get("back")) else "chat",
    }
    return render(request, "schedules/edit.html", context, status=status)


@login_required
@require_POST
def schedule_action(request: HttpRequest, schedule_id: int, action: str) -> HttpResponse:
    """Pause, resume, run now or delete (services check who may: 403 for another member;
    404 for anyone who cannot see the schedule)."""
    schedule, reads = _schedule_or_404(request, schedule_id)
    person = request.user
    if action not in ("pause", "resume", "run", "delete"):
        raise Http404("No such action.")
    if not may_manage(person, schedule):
        raise PermissionDenied("Only its owner, the chat's admins and staff change a schedule.")
    try:
        if action == "pause":
            name = person.get_full_name() or person.get_username()
            schedule_pause(schedule=schedule, reason=f"paused by {name}", by=person)
            messages.success(request, f"Schedule #{schedule.pk} is paused.")
        elif action == "resume":
            schedule_resume(schedule=schedule, by=person)
            messages.success(request, f"Schedule #{schedule.pk} runs again.")
        elif action == "run":
            if not reads:
                raise PermissionDenied("You can no longer read this schedule's chat.")
            try:
                run = schedule_run_now(schedule=schedule, by=person)
            except PermissionDenied as refusal:
                if schedule.approval == Schedule.Approval.APPROVED:
                    raise
                # Pending or rejected: a chat admin's decision, said as a message.
                messages.warning(request, f"Schedule #{schedule.pk} does not run: {refusal}")
                return _back(request, schedule)
            if run.status == ScheduleRun.Status.DUE:
                note = "it starts as soon as the chat is free (a turn is under way there)."
            else:
                note = f"it is {run.get_status_display().lower()}."
            messages.success(request, f"Schedule #{schedule.pk} runs now: {note}")
        else:
            schedule_delete(schedule=schedule, by=person)
            messages.success(request, f"Schedule #{schedule_id} is deleted.")
    except ScheduleSpecError as refusal:  # run now while an earlier one is open
        messages.warning(request, f"Schedule #{schedule.pk}: {refusal}.")
    except PermissionDenied as refusal:
        if action != "resume":
            raise
        # Allowed to manage it, but its owner can no longer read the chat: say so.
        messages.warning(request, f"Schedule #{schedule.pk} stays paused: {refusal}")
    return _back(request, schedule)


@login_required
@require_http_methods(["GET", "POST"])
def timezone_settings(request: HttpRequest) -> HttpResponse:
    """The viewer's own time zone: the pages show fire and run times in it."""
    error = ""
    status = 200
    value = person_timezone(request.user)
    if request.method == "POST":
        value = request.POST.get("timezone", "")[:64]
        try:
            saved = person_timezone_set(person=request.user, tz=value)
        except ScheduleSpecError as refusal:
            error, status = str(refusal), 400
        else:
            messages.success(request, f"Times are now shown in {saved}.")
            return redirect("timezone_settings")
    context = {"value": value, "error": error, "viewer_tz": person_timezone(request.user)}
    return render(request, "schedules/timezone.html", context, status=status)
