"""Django admin for skills: skills with reviewer actions, read-only versions with a diff
and a rollback form, proposals with a decision form and bulk decisions, and the read-only
audit trail and usage records.

Nothing is added, edited or deleted here, not even by a superuser: skills come from the
agent, imports and approved proposals, and archiving is the recoverable delete. Every change
the admin offers goes through `skills.reviews` as the logged-in person with via="admin", so
only skill reviewers (`skills.policy.may_review`) act; others see no actions or forms, and a
direct POST is refused by the same services and changes nothing.

Every decision is bound to what the page showed: the rollback form carries the version that
was current (`shown_version`), a proposal's form and each row of the proposal list carry the
version the proposal was compared with, and a skill that moved on in between is refused.
Skill text is untrusted (it may hold an injection the scanner learnt about later): it is
always escaped, with hidden code points shown as markers (`reveal_hidden`). Chat titles are
shown and linked like in the chats and memory admins (the operators' record, SECURITY.md).
"""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import Count, F, IntegerField, OuterRef, Subquery, Value
from django.db.models.functions import Coalesce, Left
from django.http import HttpResponseNotAllowed
from django.shortcuts import get_object_or_404, redirect
from django.urls import path, reverse
from django.utils.html import format_html

from chats.admin import NoWrites, ReadOnlyAdmin, admin_link
from chats.labels import identity_label
from hermes_site.scanning import reveal_hidden
from skills.admin_common import (
    HEAD_CHARS,
    PENDING,
    ROWS_SHOWN,
    SHORT_TEXT,
    ReviewerActions,
    _changelist,
    _files,
    _names,
    _pretty,
    _proposal_link,
    _report,
    _short,
    _source,
    _version_label,
    _who,
)
from skills.diff import content_diff_cached
from skills.format import SKILL_FILE
from skills.models import Skill, SkillEvent, SkillUsage, SkillVersion, Via
from skills.reviews import skill_pin, skill_rollback, skill_set_status
from skills.selectors import LINKED_VERSION_CONTENT, VERSION_CONTENT, skill_events, skill_versions
from skills.services import SkillConflict, SkillInvalid, SkillNotAllowed

# --- skills -------------------------------------------------------------------------------

ARCHIVED = Skill.Status.ARCHIVED
# change: (verb, note for skills already so, "already so?", the reviewer service to call)
SKILL_CHANGES = {
    "archive": (
        "Archived",
        "Already archived",
        lambda skill: skill.status == ARCHIVED,
        lambda **kw: skill_set_status(archived=True, **kw),
    ),
    # Restoring is un-archiving: a stale skill is left as it is.
    "restore": (
        "Restored",
        "Not archived",
        lambda skill: skill.status != ARCHIVED,
        lambda **kw: skill_set_status(archived=False, **kw),
    ),
    "pin": (
        "Pinned",
        "Already pinned",
        lambda skill: skill.pinned,
        lambda **kw: skill_pin(pinned=True, **kw),
    ),
    "unpin": (
        "Unpinned",
        "Not pinned",
        lambda skill: not skill.pinned,
        lambda **kw: skill_pin(pinned=False, **kw),
    ),
}


@admin.register(Skill)
class SkillAdmin(ReviewerActions, NoWrites, admin.ModelAdmin):
    list_display = (
        "slug",
        "category",
        "status",
        "scope",
        "owner",
        "pinned",
        "version",
        "short_description",
        "uses",
        "last_used",
        "updated_at",
    )
    list_filter = ("status", "scope", "category", "pinned")
    list_select_related = ("owner_person", "owner_actor__person")
    search_fields = ("slug", "description")
    ordering = ("slug",)
    actions = ("archive_selected", "restore_selected", "pin_selected", "unpin_selected")
    fields = (
        "slug",
        "category",
        "status",
        "scope",
        "owner",
        "pinned",
        "version",
        "description_shown",
        "uses",
        "last_used",
        "created_at",
        "updated_at",
    )
    readonly_fields = fields
    change_form_template = "admin/skills/skill/change_form.html"

    def get_queryset(self, request):
        loads = SkillUsage.objects.filter(skill=OuterRef("pk")).order_by()
        counted = loads.values("skill").annotate(n=Count("pk")).values("n")
        return (
            super()
            .get_queryset(request)
            .annotate(
                current_number=F("current_version__number"),
                use_count=Coalesce(Subquery(counted, output_field=IntegerField()), Value(0)),
                last_use=Subquery(loads.order_by("-created_at").values("created_at")[:1]),
            )
        )

    @admin.display(description="owner")
    def owner(self, skill: Skill) -> str:
        """A personal skill's owner, by identity (promote it on its dashboard page)."""
        if skill.scope != "personal":
            return "—"
        return identity_label(actor=skill.owner_actor, person=skill.owner_person) or "(gone)"

    @admin.display(description="version", ordering="current_number")
    def version(self, skill: Skill) -> str:
        return _version_label(skill.current_number)

    @admin.display(description="description")
    def short_description(self, skill: Skill) -> str:
        return _short(skill.description)

    @admin.display(description="description")
    def description_shown(self, skill: Skill) -> str:
        return reveal_hidden(skill.description)

    @admin.display(description="uses", ordering="use_count")
    def uses(self, skill: Skill):
        url = _changelist(SkillUsage, skill__id__exact=skill.pk)
        return format_html('<a href="{}">{}</a>', url, skill.use_count)

    @admin.display(description="last used", ordering="last_use")
    def last_used(self, skill: Skill):
        return skill.last_use or "never"

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """The skill's page: its current content, versions, pending proposals and audit trail."""
        context = dict(extra_context or {})
        skill = self.get_object(request, object_id)
        if skill is not None:
            context.update(self._page(skill))
        return super().change_view(request, object_id, form_url, context)

    def _page(self, skill: Skill) -> dict:
        current = skill.current_version
        versions = skill_versions(skill).defer(*VERSION_CONTENT)
        events = skill_events(skill).select_related("chat", "turn").defer(*LINKED_VERSION_CONTENT)
        event_count = events.count()
        shown_events = list(events[max(0, event_count - ROWS_SHOWN) :])
        return {
            "skill_current": current,
            "content_title": f"Current version (v{current.number})" if current else "",
            "skill_md": current.skill_md if current else "",
            "skill_files": _files(current.files if current else {}),
            "versions": [
                {
                    "link": admin_link(version, f"v{version.number}"),
                    "version": version,
                    "author": _who(version.author_person, version.author_actor),
                    "source": _source(version.source_chat, version.source_turn),
                }
                for version in versions.select_related("source_chat", "source_turn")[:ROWS_SHOWN]
            ],
            "version_count": skill.versions.count(),
            "versions_url": _changelist(SkillVersion, skill__id__exact=skill.pk),
            "pending": [
                admin_link(proposal)
                for proposal in skill.proposals.filter(status=PENDING).defer(*VERSION_CONTENT)
            ],
            "events": [_event_row(event) for event in shown_events],
            "event_count": event_count,
            "events_url": _changelist(SkillEvent, skill__id__exact=skill.pk),
        }

    def _each(self, request, queryset, change: str) -> None:
        verb, note, unchanged_if, act = SKILL_CHANGES[change]
        done, unchanged, failures = [], [], []
        for skill in (
            queryset.select_related(None).order_by("slug").only("slug", "status", "pinned")
        ):
            if unchanged_if(skill):
                unchanged.append(skill.slug)
                continue
            try:
                act(name=skill.slug, person=request.user, via=Via.ADMIN)
            except SkillNotAllowed:
                failures.append(f"{skill.slug}: not {verb.lower()}, you may not change skills.")
            except SkillConflict as exc:
                failures.append(f"{skill.slug}: not {verb.lower()}, {exc}.")
            else:
                done.append(skill.slug)
        lines = []
        if done:
            noun = "skill" if len(done) == 1 else "skills"
            lines.append((f"{verb} {len(done)} {noun}: {_names(done)}.", messages.SUCCESS))
        if unchanged:
            lines.append((f"{note}, nothing changed: {_names(unchanged)}.", messages.INFO))
        _report(self, request, lines, failures)

    @admin.action(description="Archive selected skills", permissions=["review"])
    def archive_selected(self, request, queryset) -> None:
        self._each(request, queryset, "archive")

    @admin.action(description="Restore selected skills", permissions=["review"])
    def restore_selected(self, request, queryset) -> None:
        self._each(request, queryset, "restore")

    @admin.action(description="Pin selected skills", permissions=["review"])
    def pin_selected(self, request, queryset) -> None:
        self._each(request, queryset, "pin")

    @admin.action(description="Unpin selected skills", permissions=["review"])
    def unpin_selected(self, request, queryset) -> None:
        self._each(request, queryset, "unpin")


def _event_row(event: SkillEvent) -> dict:
    """What the audit tables show of one event (the template escapes and reveals text)."""
    return {
        "event": event,
        "who": _who(event.person, event.actor, event.via),
        "version": admin_link(event.version, f"v{event.version.number}") if event.version else "—",
        "proposal": _proposal_link(event.proposal_id),
        "source": _source(event.chat, event.turn),
        "detail": _pretty(event.detail) if event.detail else "",
        # Multi-line or long text folds away, so the table stays readable.
        "fold_before": "\n" in event.before or len(event.before) > SHORT_TEXT,
        "fold_after": "\n" in event.after or len(event.after) > SHORT_TEXT,
    }


# --- versions -----------------------------------------------------------------------------


class RollbackForm(forms.Form):
    shown_version = forms.IntegerField(min_value=1)


@admin.register(SkillVersion)
class SkillVersionAdmin(ReviewerActions, ReadOnlyAdmin):
    list_display = ("skill", "number", "change", "author", "created_at", "short_hash")
    list_filter = ("change",)
    list_select_related = ("skill", "author_person", "author_actor")
    search_fields = ("skill__slug", "=content_hash")
    ordering = ("skill__slug", "-number")
    show_full_result_count = False
    fields = (
        "skill",
        "number",
        "change",
        "current",
        "author",
        "source",
        "reason_shown",
        "content_hash",
        "created_at",
    )
    readonly_fields = fields
    change_form_template = "admin/skills/skillversion/change_form.html"

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        if request.resolver_match and request.resolver_match.url_name.endswith("_changelist"):
            queryset = queryset.defer(*VERSION_CONTENT)  # a list never shows the content
        return queryset

    @admin.display(description="author")
    def author(self, version: SkillVersion) -> str:
        return _who(version.author_person, version.author_actor)

    @admin.display(description="content hash")
    def short_hash(self, version: SkillVersion) -> str:
        return version.content_hash[:12]

    @admin.display(description="current")
    def current(self, version: SkillVersion) -> str:
        if version.skill.current_version_id == version.pk:
            return "yes: this is the skill's current version"
        current = version.skill.current_version
        if current is None:
            return "no: the skill has no current version"
        return format_html("no: the skill is at {}", admin_link(current, f"v{current.number}"))

    @admin.display(description="source")
    def source(self, version: SkillVersion) -> str:
        return _source(version.source_chat, version.source_turn)

    @admin.display(description="reason")
    def reason_shown(self, version: SkillVersion) -> str:
        return reveal_hidden(version.reason) or "—"

    def get_urls(self):
        rollback = self.admin_site.admin_view(self.rollback_view)
        return [
            path("<int:version_id>/rollback/", rollback, name="skills_skillversion_rollback"),
            *super().get_urls(),
        ]

    def change_view(self, request, object_id, form_url="", extra_context=None):
        """A version's page: its content, front matter, the diff against the version before it,
        and for a skill reviewer a rollback form bound to the version now current."""
        context = dict(extra_context or {})
        version = self.get_object(request, object_id)
        if version is not None:
            previous = (
                version.skill.versions.filter(number__lt=version.number).order_by("-number").first()
            )
            context.update(
                {
                    "content_title": f"Content of v{version.number}",
                    "skill_md": version.skill_md,
                    "skill_files": _files(version.files),
                    "front_matter": _pretty(version.front_matter),
                    "diff_title": (
                        f"Changes from v{previous.number} to v{version.number}"
                        if previous
                        else "The first version: everything is new"
                    ),
                    "left_label": f"v{previous.number}" if previous else "(nothing)",
                    "right_label": f"v{version.number}",
                    "diffs": content_diff_cached(before=previous, after=version),
                }
            )
            current = version.skill.current_version
            if self.has_review_permission(request) and current and current.pk != version.pk:
                context["rollback"] = {
                    "url": reverse("admin:skills_skillversion_rollback", args=[version.pk]),
                    "shown_version": current.number,
                }
        return super().change_view(request, object_id, form_url, context)

    def rollback_view(self, request, version_id: int):
        """Make this version's content current again, if the skill is still at the version
        the page showed; refused (nothing changes) otherwise or for non-reviewers."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_view_permission(request):
            raise PermissionDenied
        version = get_object_or_404(SkillVersion.objects.select_related("skill"), pk=version_id)
        back = redirect("admin:skills_skillversion_change", version.pk)
        form = RollbackForm(request.POST)
        if not form.is_valid():
            self.message_user(request, "Not rolled back: the form was incomplete.", messages.ERROR)
            return back
        slug, shown = version.skill.slug, form.cleaned_data["shown_version"]
        if shown == version.number:
            self.message_user(
                request, f"Not rolled back: v{shown} is already current.", messages.WARNING
            )
            return back
        try:
            new = skill_rollback(
                name=slug,
                to_number=version.number,
                shown_version=shown,
                person=request.user,
                via=Via.ADMIN,
            )
        except SkillNotAllowed:
            self.message_user(request, "Not rolled back: only skill reviewers may.", messages.ERROR)
        except (SkillConflict, SkillInvalid) as exc:  # moved on, no such version, scan block
            self.message_user(request, f"Not rolled back: {exc}.", messages.WARNING)
        else:
            self.message_user(
                request,
                f"Rolled back {slug} to the content of v{version.number}: it is v{new.number} now.",
                messages.SUCCESS,
            )
            return redirect("admin:skills_skillversion_change", new.pk)
        return back


# --- the audit trail and usage ------------------------------------------------------------


@admin.register(SkillEvent)
class SkillEventAdmin(ReadOnlyAdmin):
    list_display = (
        "created_at",
        "kind",
        "via",
        "skill_link",
        "version_link",
        "proposal_link",
        "who",
        "path",
        "short_before",
        "short_after",
    )
    list_filter = ("kind", "via")
    list_select_related = ("skill", "version", "person", "actor")
    search_fields = ("slug", "path", "person__username", "actor__display_name")
    date_hierarchy = "created_at"
    ordering = ("-created_at", "-id")
    show_full_result_count = False
    fields = (
        "created_at",
        "kind",
        "via",
        "skill_link",
        "version_link",
        "proposal_link",
        "who",
        "source",
        "path",
        "before_shown",
        "after_shown",
        "detail_shown",
    )
    readonly_fields = fields

    def get_queryset(self, request):
        queryset = super().get_queryset(request).defer(*LINKED_VERSION_CONTENT)
        if request.resolver_match and request.resolver_match.url_name.endswith("_changelist"):
            # A list shows the start of before/after; each may hold 20,000 characters.
            queryset = queryset.defer("before", "after").annotate(
                before_head=Left("before", HEAD_CHARS), after_head=Left("after", HEAD_CHARS)
            )
        return queryset

    @admin.display(description="skill", ordering="slug")
    def skill_link(self, event: SkillEvent) -> str:
        return admin_link(event.skill, event.slug) if event.skill_id else event.slug

    @admin.display(description="version")
    def version_link(self, event: SkillEvent) -> str:
        return admin_link(event.version, f"v{event.version.number}") if event.version_id else "—"

    @admin.display(description="proposal")
    def proposal_link(self, event: SkillEvent) -> str:
        return _proposal_link(event.proposal_id)

    @admin.display(description="who")
    def who(self, event: SkillEvent) -> str:
        return _who(event.person, event.actor, event.via)

    @admin.display(description="source")
    def source(self, event: SkillEvent) -> str:
        return _source(event.chat, event.turn)

    @admin.display(description="before")
    def short_before(self, event: SkillEvent) -> str:
        return _short(event.before_head) if event.before_head else "—"

    @admin.display(description="after")
    def short_after(self, event: SkillEvent) -> str:
        return _short(event.after_head) if event.after_head else "—"

    @admin.display(description="before")
    def before_shown(self, event: SkillEvent) -> str:
        return format_html("<pre>{}</pre>", reveal_hidden(event.before)) if event.before else "—"

    @admin.display(description="after")
    def after_shown(self, event: SkillEvent) -> str:
        return format_html("<pre>{}</pre>", reveal_hidden(event.after)) if event.after else "—"

    @admin.display(description="details")
    def detail_shown(self, event: SkillEvent) -> str:
        return format_html("<pre>{}</pre>", _pretty(event.detail)) if event.detail else "—"


@admin.register(SkillUsage)
class SkillUsageAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "skill", "version_label", "file", "chat", "turn_link", "actor")
    list_filter = ("skill",)
    list_select_related = ("skill", "version", "chat", "turn", "actor")
    search_fields = ("skill__slug", "path")
    date_hierarchy = "created_at"
    ordering = ("-created_at", "-id")
    show_full_result_count = False
    fields = ("created_at", "skill", "version_label", "file", "chat", "turn_link", "actor")
    readonly_fields = fields

    def get_queryset(self, request):
        return super().get_queryset(request).defer(*LINKED_VERSION_CONTENT)

    @admin.display(description="version")
    def version_label(self, usage: SkillUsage) -> str:
        return admin_link(usage.version, f"v{usage.version.number}") if usage.version_id else "—"

    @admin.display(description="file")
    def file(self, usage: SkillUsage) -> str:
        return usage.path or SKILL_FILE

    @admin.display(description="turn (outcome)")
    def turn_link(self, usage: SkillUsage) -> str:
        if usage.turn is None:
            return "—"
        return admin_link(usage.turn, f"turn #{usage.turn_id} ({usage.turn.status})")


# The proposals admin lives in its own module; importing it registers it.
from skills import admin_proposals  # noqa: E402, F401
