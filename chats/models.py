"""Chats, Actors, membership and the append-only message History.

Vocabulary as in ARCHITECTURE.md: a Person is a Django user; an Actor is who spoke on a
channel; a Chat is the window people see and the unit of history; a Message is one
append-only history record. Writes go through `chats.services`, reads through
`chats.selectors`.
"""

import hashlib

from django.conf import settings
from django.db import models
from django.utils import timezone

from chats.keys import make_actor_key


class Channel(models.TextChoices):
    WEB = "web", "Web"
    TELEGRAM = "telegram", "Telegram"
    CLI = "cli", "Terminal"
    API = "api", "API"
    OPENAI = "openai", "OpenAI-compatible client"


class ChatKind(models.TextChoices):
    DM = "dm", "Direct message"
    GROUP = "group", "Group"
    TOPIC = "topic", "Forum topic"
    ROOM = "room", "Web room"
    CLI = "cli", "Terminal"
    API = "api", "API conversation"


class BusyMode(models.TextChoices):
    INTERRUPT = "interrupt", "Interrupt the running reply and answer the new message"
    QUEUE = "queue", "Answer messages one after another"


SHARED_CHAT_KINDS = frozenset({ChatKind.GROUP, ChatKind.TOPIC, ChatKind.ROOM})


class Actor(models.Model):
    """Who spoke: one external user on one channel, optionally linked to a Person.

    `namespace` keeps apart users whose ids come from different authorities on one channel:
    "" for the channel's own ids (Telegram user ids; Person ids on web and the terminal),
    `owner:<person id>` for the users of one API token owner, `os` for terminal logins
    without a dashboard user, `retired` for keys retired when web actors moved to Person ids.
    """

    channel = models.CharField(max_length=32)
    namespace = models.CharField(max_length=64, blank=True, default="")
    external_id = models.CharField("external user id", max_length=255)
    display_name = models.CharField(max_length=255)
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="actors",
    )
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["channel", "namespace", "external_id"], name="actor_unique_per_namespace"
            )
        ]

    def __str__(self) -> str:
        namespace = f"{self.namespace}/" if self.namespace else ""
        return f"{self.display_name} ({self.channel}:{namespace}{self.external_id})"


class Chat(models.Model):
    """The unit of history: a DM, a group, a forum topic, a web room, a CLI profile, an API id."""

    chat_key = models.CharField(max_length=600, unique=True)
    channel = models.CharField(max_length=32)
    external_id = models.CharField("external chat id", max_length=255)
    thread_id = models.CharField(max_length=255, blank=True, default="")
    kind = models.CharField(max_length=16, choices=ChatKind.choices)
    title = models.CharField(max_length=255, blank=True, default="")
    busy_mode = models.CharField(
        max_length=16,
        choices=BusyMode.choices,
        default=BusyMode.INTERRUPT,
        help_text="What a new message does while the agent is answering in this chat.",
    )
    created_at = models.DateTimeField(default=timezone.now)
    last_activity_at = models.DateTimeField(default=timezone.now, db_index=True)
    members = models.ManyToManyField(
        settings.AUTH_USER_MODEL, through="ChatMember", related_name="chats"
    )

    class Meta:
        ordering = ["-last_activity_at"]

    def __str__(self) -> str:
        return self.title or self.chat_key

    @property
    def is_shared(self) -> bool:
        return self.kind in SHARED_CHAT_KINDS


class ChatMember(models.Model):
    class Role(models.TextChoices):
        OWNER = "owner", "Owner"
        ADMIN = "admin", "Admin"
        MEMBER = "member", "Member"

    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="memberships")
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="chat_memberships"
    )
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["chat", "person"], name="chat_member_unique")
        ]

    def __str__(self) -> str:
        return f"{self.person} in {self.chat} ({self.role})"


class Message(models.Model):
    """One append-only history record. The assembled prompt is never stored as a message."""

    class Role(models.TextChoices):
        USER = "user", "User"
        ASSISTANT = "assistant", "Assistant"
        TOOL = "tool", "Tool"
        SYSTEM = "system", "System"
        SUMMARY = "summary", "Summary"
        MARKER = "marker", "Marker"

    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="messages")
    actor = models.ForeignKey(
        Actor, null=True, blank=True, on_delete=models.PROTECT, related_name="messages"
    )
    role = models.CharField(max_length=16, choices=Role.choices)
    text = models.TextField(blank=True, default="")
    parts = models.JSONField("structured parts", default=list, blank=True)
    external_id = models.CharField("external message id", max_length=255)
    source_ts = models.DateTimeField("source timestamp", null=True, blank=True)
    created_at = models.DateTimeField("stored at", default=timezone.now)
    token_count = models.PositiveIntegerField(default=0)
    reply_to = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="replies"
    )
    metadata = models.JSONField(default=dict, blank=True)
    edited_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["chat", "external_id"], name="message_unique_external_id_per_chat"
            )
        ]
        indexes = [
            models.Index(fields=["chat", "id"], name="message_chat_id_idx"),
            # Reset markers and summaries are found by role within a chat on every turn.
            models.Index(fields=["chat", "role", "id"], name="message_chat_role_id_idx"),
        ]
        ordering = ["id"]

    def __str__(self) -> str:
        return f"#{self.pk} {self.role} in {self.chat_id}: {self.text[:60]}"

    @property
    def actor_key(self) -> str | None:
        if self.actor is None:
            return None
        return make_actor_key(self.chat.channel, self.chat.external_id, self.actor.external_id)

    @property
    def is_reset_marker(self) -> bool:
        return self.role == self.Role.MARKER and self.metadata.get("marker") == "reset"


class HistoryVersion(models.Model):
    """A random number that changes whenever a chat's stored history changes other than by a
    new message: an edit or a deletion of one of its messages (`scope` = the chat's id), or a
    rename of any actor (`scope` = 0). Written only by database triggers (migration 0014),
    so every writer counts: the ORM, `.update()`, raw SQL, another process. The context
    builder's row cache (`chats.agent.rowcache`) keeps a chat's rows only while it is
    unchanged. A chat's row is created with the chat (never by a read); a new message changes
    nothing (the cache reads what is newer than it holds)."""

    scope = models.BigIntegerField(primary_key=True)
    version = models.BigIntegerField()

    def __str__(self) -> str:
        return f"history version of {self.scope or 'actors'}: {self.version}"


class MessageEdit(models.Model):
    """A platform edit of a message: the text before and after, so the original stays auditable."""

    message = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="edits")
    previous_text = models.TextField()
    previous_parts = models.JSONField(default=list, blank=True)
    new_text = models.TextField()
    new_parts = models.JSONField(default=list, blank=True)
    source_ts = models.DateTimeField(null=True, blank=True)
    recorded_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"edit of message #{self.message_id} at {self.recorded_at:%Y-%m-%d %H:%M}"


class Turn(models.Model):
    """One run of the agent answering a trigger message.

    `queued → running → completed | failed | interrupted`; at most one running turn per chat
    (a partial unique index). A running turn holds a lease that its worker renews; a turn
    whose lease ran out is marked interrupted, never run again. A running turn whose next
    tool call needs a person's decision moves to `waiting` (no worker, no lease) and back to
    `queued` when the decision comes; it then continues from its stored steps."""

    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        WAITING = "waiting", "Waiting for a decision"
        COMPLETED = "completed", "Completed"
        FAILED = "failed", "Failed"
        INTERRUPTED = "interrupted", "Interrupted"

    FINISHED = frozenset({Status.COMPLETED, Status.FAILED, Status.INTERRUPTED})

    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="turns")
    trigger = models.ForeignKey(Message, on_delete=models.CASCADE, related_name="triggered_turns")
    reply = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    model = models.CharField(max_length=255, blank=True, default="")
    provider = models.CharField(max_length=64, blank=True, default="")
    prompt_tokens = models.PositiveIntegerField(default=0)
    completion_tokens = models.PositiveIntegerField(default=0)
    iterations = models.PositiveIntegerField(default=0)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    first_delta_ms = models.PositiveIntegerField(null=True, blank=True)
    error = models.TextField(blank=True, default="")
    interrupt_reason = models.CharField(max_length=255, blank=True, default="")
    # While `waiting`: what it waits for, in words (e.g. "approval of git__git_reset").
    wait_reason = models.CharField(max_length=255, blank=True, default="")
    prompt_report = models.JSONField(default=dict, blank=True)
    worker = models.CharField(max_length=255, blank=True, default="")
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["chat"],
                condition=models.Q(status="running"),
                name="turn_one_running_per_chat",
            )
        ]
        indexes = [
            models.Index(fields=["chat", "status"], name="turn_chat_status_idx"),
            # The periodic sweep reads only open turns: tiny partial indexes keep it cheap
            # however many finished turns the table holds.
            models.Index(
                fields=["lease_expires_at"],
                condition=models.Q(status="running"),
                name="turn_running_lease_idx",
            ),
            models.Index(
                fields=["created_at"], condition=models.Q(status="queued"), name="turn_queued_idx"
            ),
            models.Index(
                fields=["chat"], condition=models.Q(status="waiting"), name="turn_waiting_idx"
            ),
        ]
        ordering = ["id"]

    def __str__(self) -> str:
        return f"turn #{self.pk} ({self.status}) in {self.chat_id}"

    @property
    def is_finished(self) -> bool:
        return self.status in self.FINISHED


class TurnHold(models.Model):
    """A message whose turn is held back until it is ready: its files fetched and read
    (`reasons`, cleared by whoever waited for them), a quiet period after the last message
    of its group (`not_before`: a Telegram album), at the latest until `deadline`. Messages
    of one `group_key` in a chat get one turn, for the newest of them, and only if one of
    them wanted an answer (`respond`). Released once (`chats.agent.holds`)."""

    class State(models.TextChoices):
        HELD = "held", "Held"
        RELEASED = "released", "Released"

    message = models.OneToOneField(Message, on_delete=models.CASCADE, related_name="turn_hold")
    chat = models.ForeignKey(Chat, on_delete=models.CASCADE, related_name="+")
    group_key = models.CharField(max_length=200, blank=True, default="")
    reasons = models.JSONField(default=list, blank=True)
    respond = models.BooleanField(default=False)
    not_before = models.DateTimeField()
    deadline = models.DateTimeField()
    state = models.CharField(max_length=16, choices=State.choices, default=State.HELD)
    turn = models.ForeignKey(
        Turn, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)
    released_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["chat", "group_key"], name="turnhold_group_idx"),
            models.Index(
                fields=["deadline"], condition=models.Q(state="held"), name="turnhold_held_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"turn hold of message {self.message_id} ({self.state})"


def hash_api_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


class ApiToken(models.Model):
    """A per-person bearer token; only its SHA-256 is stored.

    An `integration` token speaks on API v1 (`/api/v1/`) for its owner's integration users;
    a `personal` key speaks on the OpenAI-compatible `/v1/` only, as its person and no one
    else (docs/OPENAI.md). Each kind is refused on the other's endpoints."""

    class Kind(models.TextChoices):
        INTEGRATION = "integration", "Integration token (API v1)"
        PERSONAL = "personal", "Personal key (OpenAI-compatible /v1)"

    person = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens"
    )
    kind = models.CharField(max_length=16, choices=Kind.choices, default=Kind.INTEGRATION)
    name = models.CharField(max_length=100, blank=True, default="")
    prefix = models.CharField(max_length=16, editable=False)
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    created_at = models.DateTimeField(default=timezone.now)
    expires_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)
    last_used_address = models.GenericIPAddressField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.person})"

    @property
    def is_active(self) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()


class PersonNotice(models.Model):
    """A line the hub tells one person on their dashboard, when it has no private chat of
    theirs to say it in (e.g. a scheduled run of theirs failed). Only that person sees it;
    it stays on their chat list until they dismiss it."""

    person = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="hub_notices"
    )
    kind = models.CharField(max_length=32)
    text = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    dismissed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(
                fields=["person", "-created_at"],
                condition=models.Q(dismissed_at__isnull=True),
                name="person_notice_open_idx",
            )
        ]

    def __str__(self) -> str:
        return f"notice for {self.person_id}: {self.text[:40]}"
