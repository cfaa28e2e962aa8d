"""Writes of the tools app: servers, the tools they announce, chat toolsets, call audit.

Every write is keyword-only and atomic and leaves a `ToolAudit` row (calls leave their own
`ToolCall` row). Who may do what is `toolservers.policy`; `via="command"` is the operator
at the shell (manage.py), who may do everything, as for import_skills.
"""

import hashlib
import json
import re
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
from toolservers.policy import may_decide, may_manage_servers

VIA_COMMAND = "command"
VIA_DASHBOARD = "dashboard"
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The hub's own secrets: a server may never be handed them, not even by reference.
FORBIDDEN_REFERENCES = frozenset(
    {"SECRET_KEY", "DATABASE_URL", "REDIS_URL", "LLM_API_KEY", "TELEGRAM_BOT_TOKEN"}
)
EXCERPT_CHARS = 2000


def _audit(*, action: str, by, via: str, server_slug: str = "", chat=None, **detail) -> None:
    ToolAudit.objects.create(
        action=action, person=by, via=via, server_slug=server_slug, chat=chat, detail=detail
    )


def _check_values(label: str, values: dict | None, *, names_are_env: bool) -> dict:
    """Literal strings or {"env": NAME} references; the hub's own secrets are refused."""
    values = dict(values or {})
    for name, value in values.items():
        if names_are_env and not ENV_NAME.match(str(name)):
            raise ValidationError(f"{label}: {name!r} is not a valid variable name")
        if isinstance(value, dict):
            ref = value.get("env")
            if set(value) != {"env"} or not isinstance(ref, str) or not ENV_NAME.match(ref):
                raise ValidationError(f'{label} {name}: a reference is {{"env": "NAME"}}')
            if ref in FORBIDDEN_REFERENCES:
                raise ValidationError(f"{label} {name}: the hub's {ref} is never given to a server")
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


def server_update(*, by, server: ToolServer, via: str = VIA_DASHBOARD, **changes) -> ToolServer:
    """Change a server's settings (staff; a stdio server: superusers only), validated as when
    it was added; the audit row names the fields changed (env and header values never, only
    their names). Unknown fields are a ValidationError; nothing is saved on any error."""
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
    changed = [name for name in EDITABLE if values[name] != getattr(server, name)]
    if not changed:
        return server
    for name in changed:
        setattr(server, name, values[name])
    server.full_clean(exclude=["created_by"])
    detail = {name: values[name] for name in changed if name not in ("env", "headers")}
    for secret_bearing in {"env", "headers"} & set(changed):
        detail[secret_bearing] = sorted(values[secret_bearing])  # names only
    with transaction.atomic():
        server.save(update_fields=[*changed, "updated_at"])
        _audit(action="server.edit", by=by, via=via, server_slug=server.slug, **detail)
    return server


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


def server_tool_accept_flag(*, by, tool: ServerTool, via: str = VIA_DASHBOARD) -> ServerTool:
    """Let a flagged tool through, knowingly, as it is now (staff who may manage its server;
    a later change of its description or schema needs a new acceptance)."""
    if via != VIA_COMMAND and not may_manage_servers(by, transport=tool.server.transport):
        raise PermissionDenied("only staff who manage this server accept a flagged tool")
    with transaction.atomic():
        ServerTool.objects.filter(pk=tool.pk).update(
            flag_accepted_by=by, flag_accepted_hash=tool.schema_hash
        )
        _audit(
            action="tool.flag_accepted",
            by=by,
            via=via,
            server_slug=tool.server.slug,
            tool=tool.name,
            summary=tool.scan_summary,
        )
    tool.flag_accepted_by, tool.flag_accepted_hash = by, tool.schema_hash
    return tool


def schema_hash(description: str, input_schema: dict, annotations: dict) -> str:
    blob = json.dumps([description, input_schema, annotations], sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def server_tools_record(*, server: ToolServer, announced: list[dict]) -> list[ServerTool]:
    """Store what the server announced (name, description, input_schema, annotations),
    scanning each new or changed description; a flagged tool stays off. Tools no longer
    announced are kept, marked absent."""
    now = timezone.now()
    kept: list[ServerTool] = []
    with transaction.atomic():
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
                if tool is None:
                    tool = ServerTool(server=server, name=name, first_seen=now)
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
            tool.last_seen, tool.present = now, True
            tool.task_support = item.get("task_support") or ""
            tool.save()
            kept.append(tool)
        for gone in existing.values():
            if gone.present:
                gone.present = False
                gone.save(update_fields=["present"])
        ToolServer.objects.filter(pk=server.pk).update(last_error="")
    return kept


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
