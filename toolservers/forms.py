"""The staff forms that add a tool server and edit its settings.

Environment variables and headers are edited as lines `NAME=@HUB_VARIABLE` (a reference to
a variable of the hub, read when the connection opens: how secrets are given) or
`NAME=value` (a literal). A stored literal is never shown back (it may be a secret someone
pasted): its line reads `NAME=<kept>`, which keeps it as it is; delete the line to drop it.
"""

import shlex

from django import forms
from django.conf import settings
from django.core.exceptions import ValidationError

from toolservers.models import Policy, ToolServer, Transport

KEPT = "<kept>"


def values_text(values: dict) -> str:
    """Stored env/header values as the form's lines: references by name, literals hidden."""
    lines = []
    for name, value in (values or {}).items():
        shown = f"@{value['env']}" if isinstance(value, dict) else KEPT
        lines.append(f"{name}={shown}")
    return "\n".join(lines)


def parse_values(label: str, text: str, stored: dict, *, moved: bool = False) -> dict:
    """The form's lines back into stored values; `<kept>` keeps the stored literal, unless
    the server `moved` (a new URL or command line): a kept value never follows it."""
    values: dict = {}
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.strip()
        if not line:
            continue
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not name:
            raise ValidationError(f"{label} line {number}: write NAME=value or NAME=@HUB_VARIABLE")
        if name in values:
            raise ValidationError(f"{label} line {number}: {name} is given twice")
        if value == KEPT:
            if moved:
                raise ValidationError(
                    f"{label} line {number}: a kept value is not sent to a new address or "
                    f"command; type {name}'s value again or delete the line"
                )
            if not isinstance((stored or {}).get(name), str):
                raise ValidationError(f"{label} line {number}: {name} has no stored value to keep")
            values[name] = stored[name]
        elif value.startswith("@"):
            values[name] = {"env": value[1:]}
        else:
            values[name] = value
    return values


def _names(text: str) -> list[str]:
    return [word for word in text.replace(",", " ").split() if word]


class ServerEditForm(forms.Form):
    enabled = forms.BooleanField(required=False, label="Enabled (off: no chat uses it)")
    on_by_default = forms.BooleanField(
        required=False, label="Team default (on in every chat unless that chat turns it off)"
    )
    default_policy = forms.ChoiceField(
        choices=[(Policy.DEFAULT, "from each tool's annotations"), *Policy.choices[1:]],
        required=False,
        label="Policy where a chat sets none",
    )
    call_timeout_seconds = forms.FloatField(min_value=0.1, max_value=3600, label="Call timeout (s)")
    tool_allow = forms.CharField(
        required=False,
        label="Only these tools (names; empty: every tool)",
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    tool_deny = forms.CharField(
        required=False, label="Never these tools", widget=forms.Textarea(attrs={"rows": 3})
    )
    url = forms.URLField(required=False, max_length=500, label="URL")
    headers = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3}), label="Headers"
    )
    command_line = forms.CharField(required=False, max_length=2000, label="Command and arguments")
    cwd = forms.CharField(required=False, max_length=500, label="Working directory")
    env = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 3}), label="Environment"
    )
    confirm_references = forms.BooleanField(
        required=False,
        label="The URL or command line changed: send the references above (@NAME) to it",
    )

    def __init__(self, *args, server: ToolServer, **kwargs):
        self.server = server
        super().__init__(*args, **kwargs)
        if server.transport == Transport.STDIO:
            for name in ("url", "headers"):
                del self.fields[name]
        else:
            for name in ("command_line", "cwd", "env"):
                del self.fields[name]

    def clean_url(self) -> str:
        url = self.cleaned_data.get("url", "")
        if url and not url.startswith(("http://", "https://")):
            raise ValidationError("an HTTP server needs an http:// or https:// URL")
        return url

    @property
    def allowed_references(self) -> list[str]:
        """The names and prefixes the operator allows references to (shown on the page)."""
        return list(settings.TOOLSERVERS_ENV_REFERENCES)

    @classmethod
    def for_server(cls, server: ToolServer) -> "ServerEditForm":
        """The form filled with the server's settings (literal env/header values hidden)."""
        initial = {
            "enabled": server.enabled,
            "on_by_default": server.on_by_default,
            "default_policy": server.default_policy,
            "call_timeout_seconds": server.call_timeout_seconds,
            "tool_allow": "\n".join(server.tool_allow or []),
            "tool_deny": "\n".join(server.tool_deny or []),
            "url": server.url,
            "headers": values_text(server.headers),
            "command_line": shlex.join([server.command, *(server.args or [])]),
            "cwd": server.cwd,
            "env": values_text(server.env),
        }
        return cls(initial=initial, server=server)

    def changes(self) -> dict:
        """The cleaned form as `server_update` keyword arguments (ValidationError if a line
        or the command line cannot be read)."""
        data = self.cleaned_data
        changes = {
            "enabled": data["enabled"],
            "on_by_default": data["on_by_default"],
            "default_policy": data["default_policy"] or Policy.DEFAULT,
            "call_timeout_seconds": data["call_timeout_seconds"],
            "tool_allow": _names(data["tool_allow"]),
            "tool_deny": _names(data["tool_deny"]),
        }
        if self.server.transport == Transport.STDIO:
            try:
                words = shlex.split(data["command_line"])
            except ValueError as exc:
                raise ValidationError(f"the command line cannot be read: {exc}") from None
            if not words:
                raise ValidationError("a stdio server needs a command")
            cwd = data["cwd"].strip()
            server = self.server
            moved = (words[0], words[1:], cwd) != (server.command, server.args or [], server.cwd)
            changes.update(
                command=words[0],
                args=words[1:],
                cwd=cwd,
                env=parse_values("env", data["env"], server.env, moved=moved and bool(server.pk)),
            )
        else:
            moved = bool(self.server.pk) and data["url"] != self.server.url
            changes.update(
                url=data["url"],
                headers=parse_values("header", data["headers"], self.server.headers, moved=moved),
            )
        if "confirm_references" in self.fields:
            changes["references_confirmed"] = data["confirm_references"]
        return changes


class ServerAddForm(ServerEditForm):
    """The edit form with the server's name (its slug, the prefix of its tools' names)."""

    slug = forms.SlugField(
        max_length=40,
        label="Name (lowercase, digits, - and _; the prefix of its tools: name__tool)",
    )
    field_order = ["slug"]

    def __init__(self, *args, transport: str, **kwargs):
        super().__init__(*args, server=ToolServer(transport=transport), **kwargs)
        del self.fields["confirm_references"]  # a new server has nothing to move
        self.order_fields(self.field_order)

    def clean_slug(self) -> str:
        slug = self.cleaned_data["slug"]
        if ToolServer.objects.filter(slug=slug).exists():
            raise ValidationError(f"a server named {slug} exists already")
        return slug
