"""Team memory: bounded books of short declarative facts, proposals and their audit trail.

A **MemoryBook** is one scope instance: the team, one chat, or one person (an Actor stands in
for a person until it is linked to one). A **MemoryEntry** is one fact in a book; the agent
only ever *proposes* (add, replace, remove) and a human, or the approval policy, decides.
Every change is a **MemoryEvent** written in the same transaction by `memory.services`.
"""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from chats.labels import identity_label
from chats.models import Actor, Chat, Message


class Scope(models.TextChoices):
    TEAM = "team", "Team"
    CHAT = "chat", "Chat"
    USER = "user", "Person"


class Visibility(models.TextChoices):
    PRIVATE = "private", "Private (only in their own chats)"
    SHARED = "shared", "Shared (also in group chats)"


class MemoryBook(models.Model):
    """One scope instance with its character budget."""

    scope = models.CharField(max_length=8, choices=Scope.choices)
    chat = models.ForeignKey(
        Chat, null=True, blank=True, on_delete=models.CASCADE, related_name="memory_books"
    )
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.CASCADE,
        related_name="memory_books",
    )
    actor = models.ForeignKey(
        Actor, null=True, blank=True, on_delete=models.CASCADE, related_name="memory_books"
    )
    budget_chars = models.PositiveIntegerField(
        null=True, blank=True, help_text="Character budget; empty means the scope's default."
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["scope"], condition=Q(scope="team"), name="memory_one_team_book"
            ),
            models.UniqueConstraint(
                fields=["chat"], condition=Q(scope="chat"), name="memory_one_book_per_chat"
            ),
            models.UniqueConstraint(
                fields=["person"],
                condition=Q(scope="user", person__isnull=False),
                name="memory_one_book_per_person",
            ),
            models.UniqueConstraint(
                fields=["actor"],
                condition=Q(scope="user", actor__isnull=False),
                name="memory_one_book_per_actor",
            ),
            models.CheckConstraint(
                condition=(
                    Q(scope="team", chat__isnull=True, person__isnull=True, actor__isnull=True)
                    | Q(scope="chat", chat__isnull=False, person__isnull=True, actor__isnull=True)
                    | Q(scope="user", chat__isnull=True, person__isnull=False, actor__isnull=True)
                    | Q(scope="user", chat__isnull=True, person__isnull=True, actor__isnull=False)
                ),
                name="memory_book_owner_matches_scope",
            ),
        ]

    def __str__(self) -> str:
        if self.scope == Scope.TEAM:
            return "team memory"
        if self.scope == Scope.CHAT:
            return f"chat memory of {self.subject_name}"
        return f"memory about {self.subject_name}"

    @property
    def budget(self) -> int:
        if self.budget_chars:
            return self.budget_chars
        return {
            Scope.TEAM: settings.MEMORY_BUDGET_TEAM,
            Scope.CHAT: settings.MEMORY_BUDGET_CHAT,
            Scope.USER: settings.MEMORY_BUDGET_USER,
        }[self.scope]

    @property
    def subject_name(self) -> str:
        if self.scope == Scope.TEAM:
            return "the team"
        if self.scope == Scope.CHAT:
            return self.chat.title or self.chat.chat_key
        if self.person_id:
            return self.person.get_full_name() or self.person.get_username()
        return self.actor.display_name


class MemoryEntry(models.Model):
    """One fact. `pending_change` says what waits for a decision, if anything."""

    class Status(models.TextChoices):
        PENDING = "pending", "Proposed"  # an addition waiting for a decision
        ACTIVE = "active", "Approved"
        REJECTED = "rejected", "Rejected"
        EXPIRED = "expired", "Expired"
        REMOVED = "removed", "Removed"

    class Change(models.TextChoices):
        NONE = "", "None"
        ADD = "add", "Add"
        REPLACE = "replace", "Replace"
        REMOVE = "remove", "Remove"

    book = models.ForeignKey(MemoryBook, on_delete=models.CASCADE, related_name="entries")
    text = models.TextField()
    visibility = models.CharField(max_length=8, choices=Visibility.choices, blank=True, default="")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)

    # The change waiting for a decision (an addition, a new text, or a removal).
    pending_change = models.CharField(max_length=8, choices=Change.choices, blank=True, default="")
    proposed_text = models.TextField(blank=True, default="")
    proposed_at = models.DateTimeField(null=True, blank=True)
    proposal_expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    proposed_by_actor = models.ForeignKey(
        Actor, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    proposal_message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The proposer's side (who may still revise or withdraw the proposal): the person, or
    # the actor when it has no person, and the chat the proposal was made in.
    proposed_by_person = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    proposal_chat = models.ForeignKey(
        Chat, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # The background review that proposed the waiting (or last decided) change, if one did.
    review = models.ForeignKey(
        "learning.Review",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="memory_entries",
    )
    # Bumped on every change of the entry or its proposal; a decision names the revision the
    # reviewer saw, so a proposal rewritten after it was shown is never approved unseen.
    revision = models.PositiveIntegerField(default=1)

    # Provenance of the entry itself.
    author_actor = models.ForeignKey(
        Actor, null=True, blank=True, on_delete=models.SET_NULL, related_name="memory_authored"
    )
    author_person = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="memory_authored",
    )
    source_chat = models.ForeignKey(
        Chat, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source_message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Files the entry (or a change proposed to it) drew on, from chats.work_sources:
    # [{"kind": "file", "id", "name", "chat_id", "how"}]; they bound where it may land.
    sources = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    approved_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "memory entries"
        permissions = [
            (
                "read_private_memory",
                "Can read the text of private entries about people in the admin",
            )
        ]
        indexes = [models.Index(fields=["book", "status"], name="memory_entry_book_status")]
        constraints = [
            models.CheckConstraint(
                condition=~Q(status="pending") | Q(pending_change="add"),
                name="memory_pending_entry_is_an_addition",
            )
        ]

    def __str__(self) -> str:
        # Not the text: admin titles, breadcrumbs and links show this to staff who may not
        # read a person's private entries.
        return f"memory entry #{self.pk}"

    @property
    def scope(self) -> str:
        return self.book.scope

    @property
    def is_live(self) -> bool:
        """Counts against the budget: approved, or proposed and not yet decided."""
        return self.status in (self.Status.ACTIVE, self.Status.PENDING)

    @property
    def proposer_label(self) -> str:
        """Who proposed the waiting change, by identity (the Person, the API token's owner,
        "Telegram user <id>"), the display name only as marked secondary text
        (`chats.labels`), else "the agent". `_token_owners` (from
        `chats.labels.token_owner_names`) saves a query per API user when many are shown."""
        person = self.proposed_by_person
        if person is None and self.proposed_by_actor is None and self.pending_change == "add":
            person = self.author_person
        label = identity_label(
            actor=self.proposed_by_actor, person=person, owners=getattr(self, "_token_owners", None)
        )
        return label or "the agent"

    def summary_line(self) -> str:
        """One line for lists and Telegram: status, change and text."""
        if self.pending_change == self.Change.ADD:
            return f"[proposed] {self.text}"
        if self.pending_change == self.Change.REPLACE:
            return f"[change proposed] {self.text} → {self.proposed_text}"
        if self.pending_change == self.Change.REMOVE:
            return f"[removal proposed] {self.text}"
        return self.text


class MemoryEvent(models.Model):
    """One line of the audit trail: who did what to which entry, with before/after text."""

    class Kind(models.TextChoices):
        PROPOSED = "proposed", "Proposed"
        APPROVED = "approved", "Approved"
        AUTO_APPROVED = "auto_approved", "Approved automatically"
        REJECTED = "rejected", "Rejected"
        EDITED = "edited", "Edited before approval"
        REPLACED = "replaced", "Replaced"
        REMOVED = "removed", "Removed"
        EXPIRED = "expired", "Expired"
        BLOCKED = "blocked", "Blocked by the scanner"
        MOVED = "moved", "Moved to another book"

    class Via(models.TextChoices):
        AGENT = "agent", "Agent"
        DASHBOARD = "dashboard", "Dashboard"
        ADMIN = "admin", "Admin"
        TELEGRAM = "telegram", "Telegram"
        SYSTEM = "system", "System"

    entry = models.ForeignKey(
        MemoryEntry, null=True, blank=True, on_delete=models.CASCADE, related_name="events"
    )
    book = models.ForeignKey(MemoryBook, on_delete=models.CASCADE, related_name="events")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    change = models.CharField(max_length=8, blank=True, default="")  # add / replace / remove
    via = models.CharField(max_length=16, choices=Via.choices)
    actor = models.ForeignKey(
        Actor, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="memory_events",
        help_text="The person who acted: the author of a proposal or the reviewer.",
    )
    before = models.TextField(blank=True, default="")
    after = models.TextField(blank=True, default="")
    source_chat = models.ForeignKey(
        Chat, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source_message = models.ForeignKey(
        Message, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} ({self.created_at:%Y-%m-%d %H:%M})"
