"""Django admin for skill proposals: pending first, the diff against the base version, a
decision form bound to the version shown, and bulk decisions that report each failure."""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Case, F, Value, When
from django.http import HttpResponseNotAllowed
from django.shortcuts import redirect
from django.urls import path, reverse
from django.utils.html import format_html

from chats.admin import ReadOnlyAdmin, admin_link
from hermes_site.scanning import reveal_hidden
from skills.admin_common import (
    PENDING,
    ReviewerActions,
    _files,
    _pretty,
    _report,
    _source,
    _version_label,
    _who,
)
from skills.diff import content_diff_cached
from skills.models import SkillProposal, Via
from skills.reviews import skill_proposal_decide
from skills.selectors import VERSION_CONTENT
from skills.services import SkillConflict, SkillInvalid, SkillNotAllowed, SkillStale

# --- proposals ----------------------------------------------------------------------------


class DecisionForm(forms.Form):
    decision = forms.ChoiceField(choices=(("approve", "Approve"), ("reject", "Reject")))
    shown_version = forms.CharField(required=False)  # "" for a new skill

    def clean_shown_version(self) -> int | None:
        value = self.cleaned_data["shown_version"].strip()
        if not value:
            return None
        if not value.isdigit():
            raise forms.ValidationError("not a version number")
        return int(value)


def _shown_base(request, proposal_id: int) -> int | None:
    """The version this proposal was listed as based on ("new": none); a proposal the list
    did not show (selected across all pages, or a forged post) is not decided at all."""
    value = request.POST.get(f"shown_{proposal_id}", "")
    if value == "new":
        return None
    if value.isdigit():
        return int(value)
    raise SkillStale("it was not listed on the page you decided from; open it and decide there")


@admin.register(SkillProposal)
class SkillProposalAdmin(ReviewerActions, ReadOnlyAdmin):
    list_display = (
        "id",
        "status",
        "action",
        "slug",
        "based_on",
        "skill_now",
        "author",
        "source_chat",
        "created_at",
        "origin",
    )
    list_filter = ("status", "action")
    search_fields = ("slug", "reason")
    actions = ("approve_selected", "reject_selected")
    fields = (
        "status",
        "action",
        "slug",
        "skill",
        "category",
        "based_on",
        "skill_now",
        "author",
        "source",
        "origin",
        "reason_shown",
        "content_hash",
        "created_at",
        "decided_by",
        "decided_at",
        "result",
    )
    readonly_fields = fields
    change_form_template = "admin/skills/skillproposal/change_form.html"

    def get_queryset(self, request):
        # Not super(): it orders by get_ordering() before the annotation it names exists.
        queryset = SkillProposal.objects.select_related(
            "skill", "review", "author_person", "author_actor", "source_chat"
        ).annotate(
            current_number=F("skill__current_version__number"),
            pending_first=Case(When(status=PENDING, then=Value(0)), default=Value(1)),
        )
        if request.resolver_match and request.resolver_match.url_name.endswith("_changelist"):
            queryset = queryset.defer(*VERSION_CONTENT)
        return queryset.order_by(*self.get_ordering(request))

    def get_ordering(self, request):
        return ("pending_first", "-created_at", "-id")

    def action_checkbox(self, proposal: SkillProposal):
        """The row's checkbox, plus the version this row lists it as based on, so that a bulk
        decision is bound to what the reviewer saw."""
        box = super().action_checkbox(proposal)
        shown = "new" if proposal.base_number is None else proposal.base_number
        return format_html(
            '{}<input type="hidden" name="shown_{}" value="{}">', box, proposal.pk, shown
        )

    @admin.display(description="based on", ordering="base_number")
    def based_on(self, proposal: SkillProposal) -> str:
        return "a new skill" if proposal.base_number is None else f"v{proposal.base_number}"

    @admin.display(description="skill now", ordering="current_number")
    def skill_now(self, proposal: SkillProposal) -> str:
        label = _version_label(proposal.current_number)
        if proposal.status == PENDING and proposal.current_number != proposal.base_number:
            return f"{label} (moved on: cannot be approved as proposed)"
        return label

    @admin.display(description="author")
    def author(self, proposal: SkillProposal) -> str:
        return _who(proposal.author_person, proposal.author_actor)

    @admin.display(description="source")
    def source(self, proposal: SkillProposal) -> str:
        return _source(proposal.source_chat, proposal.source_turn)

    @admin.display(description="origin")
    def origin(self, proposal: SkillProposal) -> str:
        if proposal.review_id is None:
            return proposal.origin_label or "—"
        return admin_link(proposal.review, proposal.review.origin_label)

    @admin.display(description="reason")
    def reason_shown(self, proposal: SkillProposal) -> str:
        return reveal_hidden(proposal.reason) or "—"

    @admin.display(description="resulting version")
    def result(self, proposal: SkillProposal) -> str:
        version = proposal.result_version
        return admin_link(version, f"v{version.number}") if version else "—"

    def get_urls(self):
        decide = self.admin_site.admin_view(self.decide_view)
        return [
            path("<int:proposal_id>/decide/", decide, name="skills_skillproposal_decide"),
            *super().get_urls(),
        ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """A proposal's page: the diff against the version it is based on, the proposed
        content, and for a skill reviewer a decision form bound to that version."""
        context = dict(extra_context or {})
        proposal = self.get_object(request, object_id)
        if proposal is not None:
            base = None
            if proposal.base_number is not None and proposal.skill_id is not None:
                base = proposal.skill.versions.filter(number=proposal.base_number).first()
            context.update(
                {
                    "diff_title": (
                        f"Proposed change against v{proposal.base_number}"
                        if proposal.base_number is not None
                        else "A new skill: everything is new"
                    ),
                    "left_label": f"v{base.number}" if base else "(nothing)",
                    "right_label": "proposed",
                    "content_title": "Proposed content",
                    "diffs": content_diff_cached(before=base, after=proposal),
                    "skill_md": proposal.skill_md,
                    "skill_files": _files(proposal.files),
                    "front_matter": _pretty(proposal.front_matter),
                }
            )
            if proposal.status == PENDING and self.has_review_permission(request):
                context["decision"] = {
                    "url": reverse("admin:skills_skillproposal_decide", args=[proposal.pk]),
                    "shown_version": "" if base is None else base.number,
                    "moved_on": proposal.current_number != proposal.base_number,
                    "archives": proposal.action == "delete",
                }
        return super().change_view(request, object_id, form_url, context)

    def decide_view(self, request, proposal_id: int):
        """Approve or reject one pending proposal as compared with `shown_version`."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_view_permission(request):
            raise PermissionDenied
        back = redirect("admin:skills_skillproposal_change", proposal_id)
        form = DecisionForm(request.POST)
        if not form.is_valid():
            self.message_user(request, "Choose approve or reject.", messages.ERROR)
            return back
        decision = form.cleaned_data["decision"]
        try:
            proposal = skill_proposal_decide(
                proposal_id=proposal_id,
                decision=decision,
                shown_version=form.cleaned_data["shown_version"],
                person=request.user,
                via=Via.ADMIN,
            )
        except (SkillNotAllowed, SkillConflict, SkillInvalid) as exc:
            self.message_user(request, f"Not decided: {_failure(exc)}.", messages.WARNING)
        else:
            outcome = "Approved" if decision == "approve" else "Rejected"
            self.message_user(request, f"{outcome}: {proposal}.", messages.SUCCESS)
        return back

    def _decide_each(self, request, queryset, decision: str) -> None:
        done, failures = 0, []
        rows = queryset.order_by("created_at", "id").values_list("pk", "action", "slug")
        for proposal_id, action, slug in rows:
            try:
                skill_proposal_decide(
                    proposal_id=proposal_id,
                    decision=decision,
                    shown_version=_shown_base(request, proposal_id),
                    person=request.user,
                    via=Via.ADMIN,
                )
            except (SkillNotAllowed, SkillConflict, SkillInvalid) as exc:
                failures.append(f"#{proposal_id} ({action} {slug}): not decided, {_failure(exc)}.")
            else:
                done += 1
        verb = "Approved" if decision == "approve" else "Rejected"
        noun = "proposal" if done == 1 else "proposals"
        lines = [(f"{verb} {done} skill {noun}.", messages.SUCCESS)] if done else []
        _report(self, request, lines, failures)

    @admin.action(description="Approve selected proposals", permissions=["review"])
    def approve_selected(self, request, queryset) -> None:
        self._decide_each(request, queryset, "approve")

    @admin.action(description="Reject selected proposals", permissions=["review"])
    def reject_selected(self, request, queryset) -> None:
        self._decide_each(request, queryset, "reject")


def _failure(exc: Exception) -> str:
    """Why a decision changed nothing (or only marked the proposal), in a reviewer's words."""
    if isinstance(exc, SkillNotAllowed):
        return "only skill reviewers may decide"
    return str(exc)
