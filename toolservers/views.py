"""The staff Tools page (servers, their health and tools) and a chat's toolset page.

`/tools/` is for staff only (anyone else signed in gets a 404, so the page's existence says
nothing); staff who may manage a server (a stdio server: superusers) turn it on or off, make
it a team default, add one (`/tools/add/<transport>`), edit its settings
(`/tools/<slug>/edit`) and accept a flagged, new or changed tool.
`/chats/<key>/tools` is for the chat's readers (anyone else gets the 404 of a missing chat);
its deciders (`toolservers.policy.may_decide`) turn servers and tools on or off and set
their policy; in a shared chat it lists who decides (and why), and staff name admins there.
Every write goes through `toolservers.services` (roles: `toolservers.roles`), which checks
again.
"""

import datetime

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from chats.models import Chat
from chats.selectors import chat_for_person
from toolservers import sandbox
from toolservers.forms import KEPT, ServerAddForm, ServerEditForm
from toolservers.models import Policy, ServerTool, ToolServer, Transport
from toolservers.policy import may_decide, may_manage_servers
from toolservers.roles import chat_roles, group_roles_state, member_role_set
from toolservers.runtime import runtime
from toolservers.selectors import chat_toolset_panel, servers_overview
from toolservers.services import (
    server_add,
    server_set_default,
    server_set_enabled,
    server_tool_accept,
    server_update,
    toolset_set,
)

# Set after adding, through the same service as an edit (audited with the add).
TEAM_SETTINGS = ("enabled", "on_by_default", "default_policy")


def _is_staff(person) -> bool:
    return person.is_active and (person.is_staff or person.is_superuser)


def _staff_or_404(request: HttpRequest) -> None:
    if not _is_staff(request.user):
        raise Http404("No such page.")


def _start_of_today() -> datetime.datetime:
    now = timezone.localtime()
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def _flag(value: str) -> bool:
    if value not in ("0", "1"):
        raise ValidationError("expected 0 or 1")
    return value == "1"


@login_required
@require_GET
def tools_page(request: HttpRequest) -> HttpResponse:
    """Every server with its transport, state, health (from this process's runtime and the
    last audited call), tool count, calls today and median latency, and its tools; staff only."""
    _staff_or_404(request)
    overview = servers_overview(since=_start_of_today(), is_connected=runtime.is_connected)
    rows = [
        {"o": item, "may_manage": may_manage_servers(request.user, transport=item.server.transport)}
        for item in overview
    ]
    policies = [(Policy.DEFAULT, "from annotations"), *[(p, p) for p in Policy.values if p]]
    adds = [t for t in Transport.values if may_manage_servers(request.user, transport=t)]
    context = {"rows": rows, "policies": policies, "adds": adds, "sandbox": sandbox.status()}
    return render(request, "toolservers/tools.html", context)


@login_required
@require_POST
def server_enabled(request: HttpRequest, slug: str) -> HttpResponse:
    """Turn a server on or off for every chat (the value is explicit, never a toggle, so a
    repeated or stale form sets what its button said)."""
    _staff_or_404(request)
    server = get_object_or_404(ToolServer, slug=slug)
    try:
        enabled = _flag(request.POST.get("enabled", ""))
    except ValidationError:
        return HttpResponse("enabled must be 0 or 1", status=400)
    server_set_enabled(by=request.user, server=server, enabled=enabled)  # 403 if not allowed
    messages.success(request, f"{server.slug} is now {'on' if enabled else 'off'}.")
    return redirect("tools_page")


@login_required
@require_POST
def server_default(request: HttpRequest, slug: str) -> HttpResponse:
    """Make a server a team default (on in every chat that did not turn it off) with an
    optional policy, or stop it being one; explicit values, never a toggle."""
    _staff_or_404(request)
    server = get_object_or_404(ToolServer, slug=slug)
    try:
        on = _flag(request.POST.get("on", ""))
        server_set_default(  # 403 if not allowed
            by=request.user, server=server, on=on, policy=request.POST.get("policy", "")
        )
    except ValidationError as refusal:
        return HttpResponse(f"Refused: {' '.join(refusal.messages)}", status=400)
    state = "a team default" if on else "no team default"
    messages.success(request, f"{server.slug} is now {state}.")
    return redirect("tools_page")


@login_required
def server_edit(request: HttpRequest, slug: str) -> HttpResponse:
    """A server's settings, for staff who may manage it (others 404; staff who may not, for a
    stdio server, 403). A stored literal env or header value is never shown back."""
    _staff_or_404(request)
    server = get_object_or_404(ToolServer, slug=slug)
    if not may_manage_servers(request.user, transport=server.transport):
        raise PermissionDenied("Only superusers change a stdio server.")
    if request.method == "POST":
        form = ServerEditForm(request.POST, server=server)
        if form.is_valid():
            try:
                server_update(by=request.user, server=server, **form.changes())
            except ValidationError as refusal:
                form.add_error(None, refusal)
            else:
                messages.success(request, f"Saved the settings of {server.slug}.")
                return redirect("tools_page")
        server.refresh_from_db()  # the page shows what is stored, not the refused values
        status = 400
    else:
        form, status = ServerEditForm.for_server(server), 200
    context = {
        "server": server,
        "form": form,
        "kept": KEPT,
        "allowed_references": form.allowed_references,
    }
    return render(request, "toolservers/server_edit.html", context, status=status)


@login_required
def server_add_page(request: HttpRequest, transport: str) -> HttpResponse:
    """Add a server (staff: HTTP; superusers: stdio, which runs a process on this machine;
    others 404 or 403). Nothing is on in any chat until a decider turns it on, unless it is
    made a team default here."""
    _staff_or_404(request)
    if transport not in Transport.values:
        raise Http404("No such transport.")
    if not may_manage_servers(request.user, transport=transport):
        raise PermissionDenied("Only superusers add a stdio server.")
    if request.method == "POST":
        form = ServerAddForm(request.POST, transport=transport)
        if form.is_valid():
            try:
                changes = form.changes()
                settings = {name: changes.pop(name) for name in TEAM_SETTINGS}
                with transaction.atomic():
                    server = server_add(
                        by=request.user,
                        slug=form.cleaned_data["slug"],
                        transport=transport,
                        **changes,
                    )
                    server_update(by=request.user, server=server, **settings)
            except ValidationError as refusal:
                form.add_error(None, refusal)
            else:
                messages.success(
                    request,
                    f"Added {server.slug}. Turn it on in a chat (its Tools page or /tools on "
                    f"{server.slug}) or make it a team default.",
                )
                return redirect("tools_page")
        status = 400
    else:
        initial = {"enabled": True, "call_timeout_seconds": 30.0}
        form, status = ServerAddForm(initial=initial, transport=transport), 200
    context = {
        "form": form,
        "kept": KEPT,
        "transport": Transport(transport),
        "allowed_references": form.allowed_references,
    }
    return render(request, "toolservers/server_add.html", context, status=status)


@login_required
@require_POST
def tool_accept(request: HttpRequest, slug: str, name: str) -> HttpResponse:
    """Accept a flagged, new or changed tool as it was shown: if it changed since (another
    hash), nothing is accepted and the page says so."""
    _staff_or_404(request)
    tool = get_object_or_404(
        ServerTool.objects.select_related("server"), server__slug=slug, name=name
    )
    try:
        server_tool_accept(  # 403 if not allowed
            by=request.user, tool=tool, shown_hash=request.POST.get("schema_hash", "")
        )
    except ValidationError:
        messages.warning(request, f"{slug}/{name} changed since the page was shown: read it again.")
        return redirect("tools_page")
    messages.success(request, f"Accepted {slug}/{name} as it is now.")
    return redirect("tools_page")


def _chat_or_404(request: HttpRequest, chat_key: str) -> Chat:
    """Outsiders and unknown keys get the same 404: a chat's existence never leaks. Staff
    reach any chat's tools (they read and decide toolsets everywhere: Telegram groups have
    no owners yet, so staff decide there)."""
    chat = chat_for_person(request.user, chat_key)
    if chat is None and _is_staff(request.user):
        chat = Chat.objects.filter(chat_key=chat_key).first()
    if chat is None:
        raise Http404("No such chat.")
    return chat


@login_required
@require_GET
def chat_tools_page(request: HttpRequest, chat_key: str) -> HttpResponse:
    """The servers and tools on in a chat with their policy, for its readers; its deciders
    also get the forms that change them."""
    chat = _chat_or_404(request, chat_key)
    panel = chat_toolset_panel(chat=chat, person=request.user)
    context = {
        "chat": chat,
        "panel": panel,
        "can_change": may_decide(chat, request.user),
        "policies": [(Policy.DEFAULT, "default"), *[(p, p) for p in Policy.values if p]],
        "roles": chat_roles(chat) if chat.is_shared else [],
        "roles_state": group_roles_state(chat) if chat.is_shared else None,
        "can_name_admins": chat.is_shared and _is_staff(request.user),
    }
    return render(request, "toolservers/chat_tools.html", context)


@login_required
@require_POST
def chat_tools_set(request: HttpRequest, chat_key: str) -> HttpResponse:
    """Turn a server (no `tool`) or one tool on or off in the chat with a policy; for its
    deciders (other readers 403, anyone else 404). A bad value is refused and nothing is
    written."""
    chat = _chat_or_404(request, chat_key)
    if not may_decide(chat, request.user):
        raise PermissionDenied("Only this chat's owners and admins (or staff) decide its tools.")
    server = get_object_or_404(ToolServer, slug=request.POST.get("server", ""))
    tool_name = request.POST.get("tool", "")
    if tool_name and not server.tools.filter(name=tool_name).exists():
        raise Http404("No such tool.")
    try:
        enabled = _flag(request.POST.get("enabled", ""))
        toolset_set(
            by=request.user,
            chat=chat,
            server=server,
            tool_name=tool_name,
            policy=request.POST.get("policy", ""),
            enabled=enabled,
        )
    except ValidationError as refusal:
        return HttpResponse(f"Refused: {' '.join(refusal.messages)}", status=400)
    target = f"{server.slug}/{tool_name}" if tool_name else server.slug
    messages.success(request, f"Saved {target} for this chat.")
    return redirect("chat_tools", chat_key=chat.chat_key)


@login_required
@require_POST
def chat_role_set(request: HttpRequest, chat_key: str) -> HttpResponse:
    """Staff name a member of a shared chat an admin (a decider) or a plain member again;
    kept by later readings of Telegram's administrators. Others 403 (outsiders 404)."""
    chat = _chat_or_404(request, chat_key)
    if not _is_staff(request.user):
        raise PermissionDenied("Only staff name a chat's admins.")
    if not chat.is_shared:
        return HttpResponse("Refused: a private chat has no admins to name.", status=400)
    try:
        person_id = int(request.POST.get("person", ""))
    except ValueError:
        return HttpResponse("Refused: which member?", status=400)
    role = request.POST.get("role", "")
    try:
        member = member_role_set(by=request.user, chat=chat, person_id=person_id, role=role)
    except ValidationError as refusal:
        return HttpResponse(f"Refused: {' '.join(refusal.messages)}", status=400)
    messages.success(request, f"{member.person.get_username()} is now {member.role} here.")
    return redirect("chat_tools", chat_key=chat.chat_key)
