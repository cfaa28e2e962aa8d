"""The skills pages of the dashboard: the library, one skill (any version), diffs, raw text.

Every logged-in person reads the team's skills; a personal skill only its owner and skill
reviewers (`skills.scope.for_person`: anyone else gets 404, as for a name nobody uses). A chat
is named only to people who may read it (the selectors' rows). One template per page with
named partials: htmx requests from the library's filters get `"skills/library.html#list"`;
the reviewer actions (`skills.views_actions`) answer with `"skills/skill.html#page"` or
`#head_and_events`. Every text a skill holds is shown escaped with hidden code points
revealed; the body is rendered by `chats.markdown` (sanitised).
"""

import json
import posixpath
from collections.abc import Callable

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.cache import patch_vary_headers
from django.utils.http import content_disposition_header
from django.views.decorators.http import require_GET

from chats.labels import identity_label
from chats.markdown import render_markdown
from chats.selectors import chats_readable_by
from hermes_site.scanning import reveal_hidden
from skills import policy
from skills.blobs import blob_sizes
from skills.diff import content_diff_cached
from skills.format import SKILL_FILE, SkillFormatError, required_tools, split_front_matter
from skills.forms import DiffForm, LibraryFilterForm, VersionForm
from skills.models import Skill, SkillBlob, SkillEvent, SkillVersion
from skills.scope import for_person
from skills.selectors import (
    skill_event_rows,
    skill_get,
    skill_library_categories,
    skill_usage_counts,
    skill_usage_rows,
    skill_version,
    skill_version_numbers,
    skill_version_rows,
    skills_existing,
    skills_library,
)
from toolservers.availability import tool_availability_by_key

PAGE_SIZE = 50
INLINE_FILE_CHARS = 100_000  # a longer file shows its start; the raw view has it whole
SHOWN_VERSIONS = 100
SHOWN_EVENTS = 100
SHOWN_USAGE = 50
# Front matter fields with their own row in the table; the rest is shown as JSON.
KNOWN_FIELDS = ("name", "description", "version", "license", "tags", "related_skills")


def _partial_or_page(request: HttpRequest, template: str, partial: str) -> str:
    # A history restore (back button after hx-push-url, cache miss) needs the whole page.
    if request.htmx and not request.htmx.history_restore_request:
        return f"{template}#{partial}"
    return template


@login_required
@require_GET
def library_page(request: HttpRequest) -> HttpResponse:
    """Every skill with content, searched (name, description) and filtered (category,
    status: active and stale unless asked otherwise), 50 a page, with usage and last change;
    htmx gets the list partial."""
    audience = for_person(request.user)
    form = LibraryFilterForm(request.GET, categories=skill_library_categories(audience=audience))
    form.is_valid()  # an invalid filter counts as not set; the form shows why
    filters = form.filters()
    skills = skills_library(**filters, audience=audience)
    page = Paginator(skills, PAGE_SIZE).get_page(request.GET.get("page"))
    page.object_list = list(page.object_list)
    labels = dict(SkillEvent.Kind.choices)
    for skill in page.object_list:
        skill.last_change_label = labels.get(skill.last_change_kind, skill.last_change_kind)
    context = {"form": form, "page": page, "filters": filters, "filtered": any(filters.values())}
    template = _partial_or_page(request, "skills/library.html", "list")
    response = render(request, template, context)
    patch_vary_headers(response, ["HX-Request"])
    return response


def skill_or_404(slug: str, person) -> Skill:
    """The skill called `slug` (archived ones too) if `person` may see it, or 404."""
    skill = skill_get(slug, include_archived=True, audience=for_person(person))
    if skill is None:
        raise Http404("There is no skill with this name.")
    return skill


def _body(skill_md: str) -> str:
    try:
        return split_front_matter(skill_md)[1]
    except SkillFormatError:  # stored content was validated; this only guards the page
        return skill_md


def _json(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


def _front_matter(version: SkillVersion, person) -> dict:
    front = version.front_matter if isinstance(version.front_matter, dict) else {}
    related = [name for name in front.get("related_skills") or [] if isinstance(name, str)]
    existing = skills_existing(related, audience=for_person(person)) if related else set()
    metadata = front.get("metadata")
    others = {key: value for key, value in front.items() if key not in KNOWN_FIELDS}
    others.pop("metadata", None)
    return {
        "name": front.get("name", ""),
        "description": front.get("description", ""),
        "version": front.get("version", ""),
        "license": front.get("license", ""),
        "tags": [str(tag) for tag in front.get("tags") or []],
        "related": [(name, name in existing) for name in related],
        "metadata_json": _json(metadata) if metadata else "",
        "others_json": _json(others) if others else "",
    }


def _files(version: SkillVersion) -> list[dict]:
    """Every file of `version` by path: text ones with their (start of) text, binary ones
    with their size and content type only (never rendered; downloaded as attachments)."""
    files = version.files if isinstance(version.files, dict) else {}
    binaries = version.binaries if isinstance(version.binaries, dict) else {}
    rows = [
        {
            "path": path,
            "kind": "text",
            "size": len(text.encode("utf-8", "surrogatepass")),
            "chars": len(text),
            "text": text[:INLINE_FILE_CHARS],
            "cut": len(text) > INLINE_FILE_CHARS,
        }
        for path, text in files.items()
    ]
    stored = blob_sizes(binaries.values())
    for path, sha in binaries.items():
        size, content_type = stored.get(sha, (None, ""))
        rows.append({"path": path, "kind": "binary", "size": size, "content_type": content_type})
    return sorted(rows, key=lambda row: row["path"])


# Lines other apps add under a skill's head (the learning curator: when the skill becomes
# stale). A registry, so that skills never imports the apps that build on it.
_page_notes: dict[str, Callable[[Skill], str]] = {}


def register_skill_page_note(name: str, provider: Callable[[Skill], str]) -> None:
    """Add (or replace, by name) a provider of one line ("" for none) on a skill's page."""
    _page_notes[name] = provider


def skill_context(
    request: HttpRequest,
    skill: Skill,
    *,
    shown: SkillVersion | None = None,
    notice: str = "",
    failed: bool = False,
) -> dict:
    """What the skill page and its partials show: `shown` (the current version unless
    given), its content, history, audit trail and usage, as the requesting person may see
    them."""
    current = skill.current_version
    shown = shown or current
    person = request.user
    counts = skill_usage_counts([skill]).get(skill.pk, {"count": 0, "last": None})
    previous = max((n for n in skill_version_numbers(skill) if n < shown.number), default=None)
    return {
        "skill": skill,
        "current": current,
        "shown": shown,
        "is_current": shown.pk == current.pk,
        "previous": previous,
        "front": _front_matter(shown, person),
        "body_html": render_markdown(reveal_hidden(_body(shown.skill_md))),
        "files": _files(shown),
        "versions": skill_version_rows(skill, person=person, limit=SHOWN_VERSIONS),
        "events": skill_event_rows(skill, person=person, limit=SHOWN_EVENTS),
        "events_total": skill.events.count(),
        "usage": skill_usage_rows(skill, person=person, limit=SHOWN_USAGE),
        "usage_total": counts["count"],
        "usage_last": counts["last"],
        "may_review": policy.may_review(person),
        "page_notes": [note for name in sorted(_page_notes) if (note := _page_notes[name](skill))],
        "owner_label": identity_label(actor=skill.owner_actor, person=skill.owner_person),
        "notice": notice,
        "failed": failed,
        "tools": tools_panel(request, shown),
    }


SHOWN_CHATS = 50  # the chat chooser lists the viewer's chats with the newest activity


def tools_panel(request: HttpRequest, shown: SkillVersion) -> dict | None:
    """The tools `shown` names and, for the chat `?chat=<chat key>`, whether each is on
    there; only for a chat the viewer may read (`toolservers.policy.may_read`): any other
    key, existing or not, gets the same "not a chat you can see" and nothing about it."""
    needs = required_tools(shown.front_matter)
    if not needs:
        return None
    person = request.user
    panel = {
        "tools": needs.get("tools", []),
        "toolsets": needs.get("toolsets", []),
        "chats": list(chats_readable_by(person)[:SHOWN_CHATS]),
        "chat": None,
        "answers": [],
        "refused": False,
    }
    key = (request.GET.get("chat") or "").strip()
    if not key:
        return panel
    try:
        panel["chat"], panel["answers"] = tool_availability_by_key(
            chat_key=key, person=person, tools=panel["tools"], toolsets=panel["toolsets"]
        )
    except PermissionDenied:
        panel["refused"] = True
    return panel


def shown_version(skill: Skill, number: int | None) -> SkillVersion:
    """Version `number` of `skill` (the current one for None), or 404."""
    if number is None or number == skill.current_version.number:
        return skill.current_version
    version = skill_version(skill, number)
    if version is None:
        raise Http404(f"{skill.slug} has no version {number}.")
    return version


def _version_asked(request: HttpRequest, skill: Skill) -> SkillVersion:
    """The version `?version=N` names (the current one without it), or 404."""
    form = VersionForm(request.GET)
    if not form.is_valid():
        raise Http404("Unknown version.")
    return shown_version(skill, form.cleaned_data["version"])


@login_required
@require_GET
def skill_page(request: HttpRequest, slug: str) -> HttpResponse:
    """One skill as any logged-in person may read it: the current version (or `?version=N`)
    rendered, its files, versions, audit trail and usage; reviewers also get the actions."""
    skill = skill_or_404(slug, request.user)
    shown = _version_asked(request, skill)
    return render(request, "skills/skill.html", skill_context(request, skill, shown=shown))


@login_required
@require_GET
def skill_raw(request: HttpRequest, slug: str) -> HttpResponse:
    """SKILL.md or one file (`?path=`) of a version (`?version=`, default current) as plain
    text, exactly as stored."""
    skill = skill_or_404(slug, request.user)
    version = _version_asked(request, skill)
    return raw_text_response(
        request, version, missing=f"Version {version.number} of {skill.slug} has no file"
    )


def raw_text_response(request: HttpRequest, content, *, missing: str) -> HttpResponse:
    """SKILL.md or the text file `?path=` of `content` (a version or a proposal) as plain
    text, exactly as stored, shown inline; 404 ("<missing> <path>.") for another path."""
    path = request.GET.get("path") or SKILL_FILE
    if path == SKILL_FILE:
        text = content.skill_md
    elif isinstance(content.files, dict) and path in content.files:
        text = content.files[path]
    else:
        raise Http404(f"{missing} {path}.")
    response = HttpResponse(text, content_type="text/plain; charset=utf-8")
    response["Content-Disposition"] = content_disposition_header(
        as_attachment=False, filename=posixpath.basename(path)
    )
    return response


@login_required
@require_GET
def skill_file(request: HttpRequest, slug: str) -> HttpResponse:
    """A binary file (`?path=`) of a version (`?version=`, default current), to whoever may
    read the skill: always an attachment, never sniffed, so no browser renders it here."""
    skill = skill_or_404(slug, request.user)
    version = _version_asked(request, skill)
    path = request.GET.get("path") or ""
    binaries = version.binaries if isinstance(version.binaries, dict) else {}
    blob = SkillBlob.objects.filter(pk=binaries[path]).first() if path in binaries else None
    if blob is None:
        raise Http404(f"Version {version.number} of {skill.slug} has no binary file {path}.")
    response = FileResponse(
        blob.file.open("rb"),
        as_attachment=True,
        filename=posixpath.basename(path),
        content_type=blob.content_type or "application/octet-stream",
    )
    response["X-Content-Type-Options"] = "nosniff"
    return response


@login_required
@require_GET
def skill_diff(request: HttpRequest, slug: str) -> HttpResponse:
    """Two versions of a skill side by side (`?a=N&b=M`; by default the previous version
    against the current one): SKILL.md first, then files. Unknown versions answer 404 with
    the form to choose others."""
    skill = skill_or_404(slug, request.user)
    numbers = skill_version_numbers(skill)
    current = skill.current_version.number
    defaults = {"a": max((n for n in numbers if n < current), default=current), "b": current}
    form = DiffForm(request.GET)
    context = {"skill": skill, "numbers": numbers, "current": current, "diffs": []}
    if not form.is_valid():
        bad = ", ".join(sorted(form.errors))
        context.update(a=defaults["a"], b=defaults["b"], error=f"Choose existing versions ({bad}).")
        return render(request, "skills/diff.html", context, status=404)
    a = form.cleaned_data["a"] or defaults["a"]
    b = form.cleaned_data["b"] or defaults["b"]
    context.update(a=a, b=b)
    missing = [n for n in (a, b) if n not in numbers]
    if missing:
        context["error"] = f"{skill.slug} has no version {missing[0]}; choose one of the list."
        return render(request, "skills/diff.html", context, status=404)
    left, right = skill_version(skill, a), skill_version(skill, b)
    diffs = content_diff_cached(before=left, after=right)
    context.update(diffs=diffs, left=left, right=right)
    return render(request, "skills/diff.html", context)
