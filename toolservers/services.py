"""Writes of the tools app: servers, the tools they announce, chat toolsets, call audit.

Every write is keyword-only and atomic and leaves a `ToolAudit` row (calls leave their own
`ToolCall` row). Who may do what is `toolservers.policy`; `via="command"` is the operator
at the shell (manage.py), who may do everything, as for import_skills.
"""

import hashlib
import json
from collections.abc import Iterable

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from chats.models import Chat
from hermes_site.scanning import scan_text
from toolservers.models import (
    ChatToolset,
    Policy,
    ServerTool,
    ToolAudit,
    ToolCall,
    ToolServer,
    Transport,
)
from toolservers.notices import staff_tell_tools_changed
from toolservers.policy import may_decide, may_manage_servers
from toolservers.references import ENV_NAME, reference_refusal

VIA_COMMAND = "command"
VIA_DASHBOARD = "dashboard"
# What a server connects to: moving it clears its kept values and its references must be
# confirmed again (they would go to another address or program).
TARGET_FIELDS = {Transport.HTTP: ("url",), Transport.STDIO: ("command", "args", "cwd")}
EXCERPT_CHARS = 2000


def _audit(*, action: str, by, via: str, server_slug: str = "", chat=None, **detail) -> None:
    ToolAudit.objects.create(
        action=action, person=by, via=via, server_slug=server_slug, chat=chat, detail=detail
    )


def _check_values(label: str, values: dict | None, *, names_are_env: bool) -> dict:
    """Literal strings or {"env": NAME} references to names the operator allows
    (`toolservers.references`); the hub's own configuration is refused."""
    values = dict(values or {})
    for name, value in values.items():
        if names_are_env and not ENV_NAME.match(str(name)):
            raise ValidationError(f"{label}: {name!r} is not a valid variable name")
        if isinstance(value, dict):
            ref = value.get("env")
            if set(value) != {"env"} or not isinstance(ref, str) or not ENV_NAME.match(ref):
                raise ValidationError(f'{label} {name}: a reference is {{"env": "NAME"}}')
            if refusal := reference_refusal(ref):
                raise ValidationError(f"{label} {name}: {refusal}")
        elif not isinstance(value, str):
            raise ValidationError(f"{label} {name}: a value is a string or an env reference")
    return values


def _check_connection(*, transport: str, command: str, url: str, timeout: float) -> None:
    if transport not in Transport.values:
        raise ValidationError(f"transport must be one of {', '.join(Transport.values)}")
    if transport == Transport.STDIO and not command.strip():
        raise ValidationError("a stdio server needs a command")
    if transport == Transport.HTTP and not url.startswith(("http://", "https://")):
        raise ValidationError("an HTTP server needs an http:// or https:// URL")
    if not timeout > 0:
        raise ValidationError("the call timeout must be positive")


def _check_policy(policy: str) -> str:
    if policy not in Policy.values:
        raise ValidationError(f"policy must be one of allow, ask, deny (or empty), not {policy!r}")
    return policy


def server_add(
    *,
    by,
    slug: str,
    transport: str,
    command: str = "",
    args: Iterable[str] = (),
    cwd: str = "",
    env: dict | None = None,
    url: str = "",
    headers: dict | None = None,
    call_timeout_seconds: float = 30.0,
    tool_allow: Iterable[str] = (),
    tool_deny: Iterable[str] = (),
    via: str = VIA_DASHBOARD,
) -> ToolServer:
    """Add a tool server (staff; stdio: superusers; the shell operator); nothing is on in
    any chat until a decider turns it on (or staff make it a team default)."""
    if via != VIA_COMMAND and not may_manage_servers(by, transport=transport):
        raise PermissionDenied("you may not add this tool server")
    _check_connection(transport=transport, command=command, url=url, timeout=call_timeout_seconds)
    server = ToolServer(
        slug=slug,
        transport=transport,
        command=command.strip(),
        args=[str(a) for a in args],
        cwd=cwd,
        env=_check_values("env", env, names_are_env=True),
        url=url,
        headers=_check_values("header", headers, names_are_env=False),
        call_timeout_seconds=call_timeout_seconds,
        tool_allow=list(tool_allow),
        tool_deny=list(tool_deny),
        created_by=by,
    )
    server.full_clean(exclude=["created_by"])
    with transaction.atomic():
        server.save()
        _audit(action="server.add", by=by, via=via, server_slug=slug, transport=transport)
    return server


def server_set_enabled(*, by, server: ToolServer, enabled: bool, via: str = VIA_DASHBOARD):
    """Turn a whole server on or off for every chat (same rule as adding it)."""
    if via != VIA_COMMAND and not may_manage_servers(by, transport=server.transport):
        raise PermissionDenied("you may not change this tool server")
    with transaction.atomic():
        ToolServer.objects.filter(pk=server.pk).update(enabled=enabled)
        _audit(action="server.enabled", by=by, via=via, server_slug=server.slug, enabled=enabled)
    server.enabled = enabled
    return server


def server_set_default(
    *, by, server: ToolServer, on: bool, policy: str = Policy.DEFAULT, via: str = VIA_DASHBOARD
) -> ToolServer:
    """Make a server a team default (on in every chat whose deciders did not turn it off,
    calls following `policy` where the chat sets none) or stop it being one; same rule as
    adding it."""
    if via != VIA_COMMAND and not may_manage_servers(by, transport=server.transport):
        raise PermissionDenied("you may not change this tool server")
    _check_policy(policy)
    with transaction.atomic():
        ToolServer.objects.filter(pk=server.pk).update(
            on_by_default=on, default_policy=policy, updated_at=timezone.now()
        )
        _audit(
            action="server.default", by=by, via=via, server_slug=server.slug, on=on, policy=policy
        )
    server.on_by_default, server.default_policy = on, policy
    return server


# What an edit may change, and how each field is normalised before it is compared and saved.
EDITABLE = (
    "enabled",
    "command",
    "args",
    "cwd",
    "env",
    "url",
    "headers",
    "call_timeout_seconds",
    "tool_allow",
    "tool_deny",
    "on_by_default",
    "default_policy",
)


def server_update(
    *,
    by,
    server: ToolServer,
    via: str = VIA_DASHBOARD,
    references_confirmed: bool = False,
    **changes,
) -> ToolServer:
    """Change a server's settings (staff; a stdio server: superusers only), validated as when
    it was added; the audit row names the fields changed (env and header values never, only
    their names). Unknown fields are a ValidationError; nothing is saved on any error.

    Moving a server (a new URL; for stdio a new command, arguments or directory) drops the
    literal header (env) values kept from before (values given in `changes` are taken as
    typed again), and its references must be confirmed for the new target
    (`references_confirmed`), else a ValidationError naming them."""
    if via != VIA_COMMAND and not may_manage_servers(by, transport=server.transport):
        raise PermissionDenied("you may not change this tool server")
    unknown = set(changes) - set(EDITABLE)
    if unknown:
        raise ValidationError(f"these settings cannot be edited: {', '.join(sorted(unknown))}")
    values = {name: getattr(server, name) for name in EDITABLE} | changes
    values["command"] = str(values["command"] or "").strip()
    values["args"] = [str(a) for a in values["args"] or []]
    values["tool_allow"] = [str(t) for t in values["tool_allow"] or []]
    values["tool_deny"] = [str(t) for t in values["tool_deny"] or []]
    values["env"] = _check_values("env", values["env"], names_are_env=True)
    values["headers"] = _check_values("header", values["headers"], names_are_env=False)
    try:
        values["call_timeout_seconds"] = float(values["call_timeout_seconds"])
    except (TypeError, ValueError):
        raise ValidationError("the call timeout is a number of seconds") from None
    _check_connection(
        transport=server.transport,
        command=values["command"],
        url=values["url"],
        timeout=values["call_timeout_seconds"],
    )
    _check_policy(values["default_policy"])
    moved = _moved_detail(server, values, changes, references_confirmed)
    changed = [name for name in EDITABLE if values[name] != getattr(server, name)]
    if not changed:
        return server
    for name in changed:
        setattr(server, name, values[name])
    server.full_clean(exclude=["created_by"])
    detail = {name: values[name] for name in changed if name not in ("env", "headers")}
    for secret_bearing in {"env", "headers"} & set(changed):
        detail[secret_bearing] = sorted(values[secret_bearing])  # names only
    detail.update(moved)
    with transaction.atomic():
        server.save(update_fields=[*changed, "updated_at"])
        _audit(action="server.edit", by=by, via=via, server_slug=server.slug, **detail)
    return server


def _moved_detail(server: ToolServer, values: dict, changes: dict, confirmed: bool) -> dict:
    """If the edit moves `server` to another target: drop kept literals from `values` (in
    place) and require the references to be confirmed; the audit's detail of it."""
    targets = TARGET_FIELDS.get(server.transport, ())
    if all(values[name] == getattr(server, name) for name in targets):
        return {}
    field = "headers" if server.transport == Transport.HTTP else "env"
    stored = getattr(server, field) or {}
    cleared = []
    if field not in changes:
        cleared = sorted(name for name, value in stored.items() if not isinstance(value, dict))
        values[field] = {k: v for k, v in values[field].items() if k not in cleared}
    references = sorted({v["env"] for v in values[field].values() if isinstance(v, dict)})
    if references and not confirmed:
        where = "URL" if server.transport == Transport.HTTP else "command line"
        raise ValidationError(
            f"the {where} changed: confirm that the hub's {', '.join(references)} may be "
            f"sent to the new one (its kept values are not: type them again)"
        )
    return {"cleared": cleared, "references_confirmed": references}


def toolset_set(
    *,
    by,
    chat: Chat,
    server: ToolServer,
    tool_name: str = "",
    policy: str = Policy.DEFAULT,
    enabled: bool = True,
    via: str = VIA_DASHBOARD,
) -> ChatToolset:
    """Turn a server (or one of its tools) on or off in `chat` with a policy; only the
    chat's deciders (or the shell operator) may."""
    if via != VIA_COMMAND and not may_decide(chat, by):
        raise PermissionDenied("only this chat's owners and admins (or staff) decide its tools")
    _check_policy(policy)
    with transaction.atomic():
        row, _ = ChatToolset.objects.update_or_create(
            chat=chat,
            server=server,
            tool_name=tool_name,
            defaults={
                "policy": policy,
                "enabled": enabled,
                "set_by": by,
                "updated_at": timezone.now(),
            },
        )
        _audit(
            action="toolset.set",
            by=by,
            via=via,
            server_slug=server.slug,
            chat=chat,
            tool=tool_name,
            policy=policy,
            enabled=enabled,
        )
    return row


def server_tool_accept(
    *, by, tool: ServerTool, shown_hash: str, via: str = VIA_DASHBOARD
) -> ServerTool:
    """Accept the version of `tool` that was shown (`shown_hash`), knowingly: a flagged tool
    is let through, and its annotations give its policy again. Staff who may manage its
    server only; a ValidationError, and nothing accepted, if the tool changed since it was
    shown. A later change needs a new acceptance."""
    if via != VIA_COMMAND and not may_manage_servers(by, transport=tool.server.transport):
        raise PermissionDenied("only staff who manage this server accept a tool's new version")
    with transaction.atomic():
        current = ServerTool.objects.select_for_update().get(pk=tool.pk)
        if not shown_hash or current.schema_hash != shown_hash:
            raise ValidationError(
                f"{tool.server.slug}/{tool.name} changed since it was shown: read it again"
            )
        ServerTool.objects.filter(pk=tool.pk).update(
            accepted_by=by, accepted_hash=current.schema_hash, change_note=""
        )
        _audit(
            action="tool.flag_accepted" if current.flagged else "tool.accepted",
            by=by,
            via=via,
            server_slug=tool.server.slug,
            tool=tool.name,
            summary=current.scan_summary,
            annotations=current.annotations,
            policy=current.annotations_policy,
        )
    tool.accepted_by, tool.accepted_hash, tool.change_note = by, current.schema_hash, ""
    return tool


def schema_hash(description: str, input_schema: dict, annotations: dict) -> str:
    blob = json.dumps([description, input_schema, annotations], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _what_changed(tool: ServerTool, description: str, schema: dict, annotations: dict) -> list:
    parts = [
        ("description", tool.description, description),
        ("input schema", tool.input_schema, schema),
        ("annotations", tool.annotations, annotations),
    ]
    return [label for label, before, after in parts if before != after]


def server_tools_record(*, server: ToolServer, announced: list[dict]) -> list[ServerTool]:
    """Store what the server announced (name, description, input_schema, annotations),
    scanning each new or changed description; a flagged tool stays off. Tools no longer
    announced are kept, marked absent.

    The server's first listing is the version adopted with it (unflagged tools accepted as
    they are). After it, a new tool or a changed description, schema or annotations is not
    accepted: its annotations give no policy (calls ask, `ServerTool.default_policy`) until
    staff accept it (`server_tool_accept`); each such change leaves a `ToolAudit` row
    ("tool.new", "tool.changed"), and the staff who manage the server are told once per
    listing of the tools that stopped being accepted (`toolservers.notices`)."""
    now = timezone.now()
    kept: list[ServerTool] = []
    waiting: list[tuple[str, str]] = []  # (tool name, what changed) newly waiting for staff
    with transaction.atomic():
        locked = ToolServer.objects.select_for_update().get(pk=server.pk)
        first_listing = locked.tools_listed_at is None
        existing = {t.name: t for t in ServerTool.objects.select_for_update().filter(server=server)}
        for item in announced:
            name = item["name"]
            description = item.get("description") or ""
            schema = item.get("input_schema") or {"type": "object"}
            annotations = item.get("annotations") or {}
            digest = schema_hash(description, schema, annotations)
            tool = existing.pop(name, None)
            if tool is None or tool.schema_hash != digest:
                # Scanned as a skill is: it becomes prompt text. The schema's own texts count.
                scan = scan_text(f"{name}\n{description}\n{json.dumps(schema)}", kind="skill")
                was_waiting = tool is not None and not tool.accepted
                if tool is None:
                    tool = ServerTool(server=server, name=name, first_seen=now)
                    changed = ["new tool"]
                else:
                    changed = _what_changed(tool, description, schema, annotations)
                tool.description, tool.input_schema = description, schema
                tool.annotations, tool.schema_hash = annotations, digest
                tool.flagged = not scan.allowed
                tool.scan_summary = "" if scan.allowed else scan.summary()
                if tool.flagged:
                    _audit(
                        action="tool.flagged",
                        by=None,
                        via="runtime",
                        server_slug=server.slug,
                        tool=name,
                        summary=tool.scan_summary,
                    )
                if first_listing:
                    tool.accepted_hash = "" if tool.flagged else digest
                elif tool.accepted:  # back to the version staff accepted
                    tool.change_note = ""
                else:
                    note = _note(changed, tool.change_note if was_waiting else "")
                    tool.change_note = note
                    _audit(
                        action="tool.new" if changed == ["new tool"] else "tool.changed",
                        by=None,
                        via="runtime",
                        server_slug=server.slug,
                        tool=name,
                        changed=changed,
                        annotations=annotations,
                        policy=tool.default_policy,
                    )
                    if not was_waiting:
                        waiting.append((name, note))
            tool.last_seen, tool.present = now, True
            tool.task_support = item.get("task_support") or ""
            tool.save()
            kept.append(tool)
        for gone in existing.values():
            if gone.present:
                gone.present = False
                gone.save(update_fields=["present"])
        updates = {"last_error": ""}
        if first_listing:
            updates["tools_listed_at"] = now
            _audit(
                action="server.first_listing",
                by=None,
                via="runtime",
                server_slug=server.slug,
                tools={tool.name: tool.default_policy for tool in kept},
            )
        ToolServer.objects.filter(pk=server.pk).update(**updates)
        if waiting:
            staff_tell_tools_changed(server=server, changes=waiting)
    return kept


def _note(changed: list[str], earlier: str) -> str:
    """What a waiting tool's page line says: "new tool" or "changed: <parts>" (merged with
    what changed before, while it still waits)."""
    if changed == ["new tool"] or earlier == "new tool":
        return "new tool"
    parts = [p for p in earlier.removeprefix("changed: ").split(", ") if p] if earlier else []
    parts += [part for part in changed if part not in parts]
    return ("changed: " + ", ".join(parts))[:200] if parts else "changed"


def server_error_record(*, server: ToolServer, error: str) -> None:
    """Remember the server's last connection error (shown to staff)."""
    ToolServer.objects.filter(pk=server.pk).update(last_error=error[:2000])


def tool_call_record(
    *,
    context,
    server: ToolServer,
    tool: str,
    arguments: dict,
    decision: str,
    result: str = "",
    error: str = "",
    duration_ms: int = 0,
    decided_by=None,
    result_chars: int | None = None,
) -> ToolCall:
    """The audit row of one call (or refusal), written whatever the outcome; `result_chars`
    is the result's size before it was cut for the model (default: what is stored)."""
    text = error or result
    return ToolCall.objects.create(
        turn=context.turn,
        chat=context.chat,
        actor=context.actor,
        person=context.person,
        server=server,
        server_slug=server.slug,
        tool=tool,
        arguments=arguments,
        result_excerpt=(result or "")[:EXCERPT_CHARS],
        result_chars=len(text) if result_chars is None else result_chars,
        error=error[:EXCERPT_CHARS],
        duration_ms=duration_ms,
        decision=decision,
        decided_by=decided_by,
    )
