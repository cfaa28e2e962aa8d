"""Tool servers (MCP), the tools they announce, per-chat toolsets and the audit of calls.

A `ToolServer` is configured by staff (stdio: superusers only). Secrets are never stored:
an env or header value is either a literal or `{"env": "NAME"}`, a reference to an
environment variable of the hub read when the connection opens. Writes go through
`toolservers.services`, reads through `toolservers.selectors`.
"""

from django.conf import settings
from django.db import models
from django.utils import timezone


class Transport(models.TextChoices):
    STDIO = "stdio", "Local process (stdio)"
    HTTP = "http", "Streamable HTTP"


class Policy(models.TextChoices):
    DEFAULT = "", "From the tool's annotations"
    ALLOW = "allow", "Allow"
    ASK = "ask", "Ask a decider first"
    DENY = "deny", "Deny"


class ToolServer(models.Model):
    slug = models.SlugField(max_length=40, unique=True)
    transport = models.CharField(max_length=8, choices=Transport.choices)
    command = models.CharField(max_length=500, blank=True, default="")
    args = models.JSONField(default=list, blank=True)
    cwd = models.CharField(max_length=500, blank=True, default="")
    # {NAME: "literal"} or {NAME: {"env": "HUB_VARIABLE"}}: secrets by reference only.
    env = models.JSONField(default=dict, blank=True)
    url = models.URLField(max_length=500, blank=True, default="")
    headers = models.JSONField(default=dict, blank=True)  # values as in `env`
    enabled = models.BooleanField(default=True)
    call_timeout_seconds = models.FloatField(default=30.0)
    tool_allow = models.JSONField(default=list, blank=True)  # empty: every tool
    tool_deny = models.JSONField(default=list, blank=True)
    # A team default: on in every chat unless that chat's deciders turned it off.
    on_by_default = models.BooleanField(default=False)
    # The policy of a call when the chat sets none (empty: from the tool's annotations).
    default_policy = models.CharField(max_length=8, choices=Policy.choices, blank=True, default="")
    last_error = models.TextField(blank=True, default="")
    # The first listing of the server's tools: the versions adopted with the server (their
    # annotations count); a tool that is new or changed after it waits for staff to accept it.
    tools_listed_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    def tool_listed(self, name: str) -> bool:
        """Does the server's allow/deny list let `name` through?"""
        if name in (self.tool_deny or []):
            return False
        return not self.tool_allow or name in self.tool_allow


class ServerTool(models.Model):
    server = models.ForeignKey(ToolServer, on_delete=models.CASCADE, related_name="tools")
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True, default="")
    input_schema = models.JSONField(default=dict)
    annotations = models.JSONField(default=dict, blank=True)
    schema_hash = models.CharField(max_length=64)
    first_seen = models.DateTimeField(default=timezone.now)
    last_seen = models.DateTimeField(default=timezone.now)
    present = models.BooleanField(default=True)  # False: the server no longer announces it
    flagged = models.BooleanField(default=False)  # the scanner found something: stays off
    scan_summary = models.TextField(blank=True, default="")
    # The version (schema hash: description, input schema, annotations) staff accepted: the
    # server's first listing, or staff's acceptance later (by: who; empty: the first
    # listing). Only an accepted version's annotations give a policy, and only an accepted
    # version of a flagged tool is used. A change is scanned again and waits for acceptance.
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    accepted_hash = models.CharField(max_length=64, blank=True, default="")
    # What differs from the last version seen while it waits ("new tool", "changed: …").
    change_note = models.CharField(max_length=200, blank=True, default="")
    # The tool's `execution.taskSupport` as announced ("", forbidden, optional, required): a
    # tool that runs only as an MCP task is never offered (the hub does not run tasks).
    task_support = models.CharField(max_length=16, blank=True, default="")

    class Meta:
        ordering = ["server__slug", "name"]
        constraints = [
            models.UniqueConstraint(fields=["server", "name"], name="server_tool_unique")
        ]

    def __str__(self) -> str:
        return f"{self.server.slug}/{self.name}"

    @property
    def accepted(self) -> bool:
        """Is the version announced now the one staff accepted (or the first listing)?"""
        return bool(self.accepted_hash) and self.accepted_hash == self.schema_hash

    @property
    def usable(self) -> bool:
        """Announced, and either clean or accepted by staff as it is now."""
        return self.present and (not self.flagged or self.accepted)

    @property
    def left_out_reason(self) -> str:
        """Why the engine never offers this tool ("" when it may): an invalid input schema,
        or a tool that runs only as an MCP task."""
        from toolservers.schemas import tool_problem

        return tool_problem(self)

    @property
    def default_policy(self) -> str:
        """From the annotations of an accepted version: read-only tools are allowed, anything
        else (destructive or unknown) asks. A version nobody accepted asks, whatever the
        server says of it: a server never lifts its own tools' approval."""
        return self.annotations_policy if self.accepted else Policy.ASK

    @property
    def annotations_policy(self) -> str:
        """What the annotations alone would give (shown to staff before they accept)."""
        return Policy.ALLOW if (self.annotations or {}).get("readOnlyHint") else Policy.ASK


class ChatToolset(models.Model):
    """A server (tool_name "") or one of its tools turned on or off in one chat."""

    chat = models.ForeignKey("chats.Chat", on_delete=models.CASCADE, related_name="toolsets")
    server = models.ForeignKey(ToolServer, on_delete=models.CASCADE, related_name="toolsets")
    tool_name = models.CharField(max_length=200, blank=True, default="")
    policy = models.CharField(max_length=8, choices=Policy.choices, blank=True, default="")
    enabled = models.BooleanField(default=True)
    set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["chat", "server", "tool_name"], name="chat_toolset_unique"
            )
        ]

    def __str__(self) -> str:
        target = f"{self.server.slug}/{self.tool_name}" if self.tool_name else self.server.slug
        return f"{target} in {self.chat} ({self.policy or 'default'})"


class ChatRoleSource(models.Model):
    """Where a person's admin or member role in a chat came from, when the hub set it:
    read from Telegram's administrators of the group (a refresh changes only these), or
    set by staff by hand (kept by every refresh). Owners and roles without a row are
    left alone by the refresh."""

    class Source(models.TextChoices):
        TELEGRAM = "telegram", "Telegram administrator"
        STAFF = "staff", "Set by staff"

    chat = models.ForeignKey("chats.Chat", on_delete=models.CASCADE, related_name="+")
    person = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    source = models.CharField(max_length=16, choices=Source.choices)
    set_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chat", "person"], name="chat_role_source_unique")
        ]

    def __str__(self) -> str:
        return f"{self.person} in {self.chat}: {self.source}"


class GroupRolesRefresh(models.Model):
    """The last reading of a group's administrators from its platform (Telegram's
    getChatAdministrators): when it succeeded, when it was last tried, and its error."""

    chat = models.OneToOneField("chats.Chat", on_delete=models.CASCADE, related_name="+")
    refreshed_at = models.DateTimeField(null=True, blank=True)  # last success
    tried_at = models.DateTimeField(default=timezone.now)
    error = models.TextField(blank=True, default="")  # of the last try; empty: it worked

    def __str__(self) -> str:
        return f"roles of {self.chat} read at {self.refreshed_at}"


class ToolCall(models.Model):
    """One call the agent made (or tried to make) to a tool server's tool."""

    class Decision(models.TextChoices):
        ALLOWED = "allowed", "Allowed by policy"
        DENIED = "denied", "Denied by policy"
        NEEDS_APPROVAL = "needs_approval", "Needed approval that could not be asked"
        INVALID = "invalid", "Refused: invalid arguments"
        APPROVED = "approved", "Approved by a decider"
        REJECTED = "rejected", "Declined by a decider"
        EXPIRED = "expired", "No decision in time"

    turn = models.ForeignKey(
        "chats.Turn", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    chat = models.ForeignKey("chats.Chat", on_delete=models.CASCADE, related_name="tool_calls")
    actor = models.ForeignKey(
        "chats.Actor", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    server = models.ForeignKey(
        ToolServer, null=True, on_delete=models.SET_NULL, related_name="calls"
    )
    server_slug = models.CharField(max_length=40)  # kept when the server is deleted
    tool = models.CharField(max_length=200)
    arguments = models.JSONField(default=dict)
    result_excerpt = models.TextField(blank=True, default="")
    result_chars = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True, default="")
    duration_ms = models.PositiveIntegerField(default=0)
    decision = models.CharField(max_length=16, choices=Decision.choices)
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.server_slug}/{self.tool} in chat {self.chat_id} ({self.decision})"


class ToolAudit(models.Model):
    """Who changed a server or a chat's toolset, and what: one row per write."""

    action = models.CharField(max_length=40)
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    via = models.CharField(max_length=16, default="dashboard")  # dashboard, command
    server_slug = models.CharField(max_length=40, blank=True, default="")
    chat = models.ForeignKey(
        "chats.Chat", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.action} {self.server_slug} by {self.person or self.via}"


class ToolApproval(models.Model):
    """The card of one `ask` call waiting for a decider: bound to that call (its turn, its
    step and the model's call id, `call_key`) and its exact arguments; `nonce` is carried by
    the card's buttons, so a press that does not name this card decides nothing."""

    class Status(models.TextChoices):
        PENDING = "pending", "Waiting for a decision"
        APPROVED = "approved", "Approved"
        DENIED = "denied", "Declined"
        EXPIRED = "expired", "No decision in time"
        CANCELLED = "cancelled", "Void (the turn ended)"

    turn = models.ForeignKey("chats.Turn", on_delete=models.CASCADE, related_name="+")
    chat = models.ForeignKey("chats.Chat", on_delete=models.CASCADE, related_name="tool_approvals")
    call_key = models.CharField(max_length=255)  # "<step message id>/<model's call id>"
    server = models.ForeignKey(ToolServer, null=True, on_delete=models.SET_NULL, related_name="+")
    server_slug = models.CharField(max_length=40)
    tool = models.CharField(max_length=200)
    function = models.CharField(max_length=64)  # the name the model called it by
    arguments = models.JSONField(default=dict)
    nonce = models.CharField(max_length=32)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_by_name = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField()
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    decided_via = models.CharField(max_length=16, blank=True, default="")
    always = models.BooleanField(default=False)  # "always allow this tool here" was chosen

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["turn", "call_key"], name="tool_approval_one_per_call")
        ]
        indexes = [
            models.Index(
                fields=["expires_at"],
                condition=models.Q(status="pending"),
                name="tool_approval_pending_idx",
            )
        ]

    def __str__(self) -> str:
        return f"{self.function} in chat {self.chat_id} ({self.status})"
