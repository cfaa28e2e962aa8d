"""Skills: procedures the agent writes, patches and reuses, with their whole history.

A **Skill** is one named procedure (its slug is the `name` of its SKILL.md and never drifts).
Every content change creates an immutable **SkillVersion** (the full SKILL.md, its parsed
front matter and the supporting files); `(skill, number)` is unique, so two writers that
raced for the same next number conflict instead of one losing the other's update. A change
that needs a reviewer waits as a **SkillProposal** bound to the version it was based on.
**SkillEvent** rows are the audit trail, written in the same transaction as the change by
`skills.services`; **SkillUsage** rows record each time a turn loaded a skill. A version's
binary files (fonts, PDFs) are **SkillBlob** rows, stored once per SHA-256 through the
`skills` alias of Django's `STORAGES` and named by hash in the version's `binaries`.
"""

from django.conf import settings
from django.core.files.storage import storages
from django.core.signals import setting_changed
from django.db import models
from django.dispatch import receiver
from django.utils import timezone
from django.utils.functional import LazyObject, empty

from chats.labels import identity_label
from chats.models import Actor, Chat, Turn


class Via(models.TextChoices):
    AGENT = "agent", "Agent"
    DASHBOARD = "dashboard", "Dashboard"
    ADMIN = "admin", "Admin"
    TELEGRAM = "telegram", "Telegram"
    COMMAND = "command", "Management command"
    SYSTEM = "system", "System"


CATEGORY_LENGTH = 255  # skills.format.CATEGORY_MAX


class _SkillBlobStorage(LazyObject):
    """`storages["skills"]`, looked up when first used (and again after STORAGES changes)
    rather than when the model is defined, so settings and tests choose the backend."""

    def _setup(self):
        self._wrapped = storages["skills"]


_blob_storage = _SkillBlobStorage()


def skill_blob_storage():
    """The storage of skill binaries (the `skills` alias of STORAGES)."""
    return _blob_storage


@receiver(setting_changed)
def _storages_changed(*, setting, **kwargs):
    if setting == "STORAGES":
        _blob_storage._wrapped = empty


class SkillBlob(models.Model):
    """One binary file's bytes, content-addressed: the same font in ten skills (or ten
    versions) is stored once. Never changed or deleted by the app once written."""

    sha256 = models.CharField(max_length=64, primary_key=True)
    size = models.PositiveBigIntegerField()
    content_type = models.CharField(max_length=100, default="application/octet-stream")
    # Named `<first two hex digits>/<sha256>` by skills.blobs.
    file = models.FileField(storage=skill_blob_storage, max_length=255)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.sha256[:12]} ({self.size} bytes)"


class Scope(models.TextChoices):
    """Whose prompts a skill reaches (skills.scope decides where it is shown)."""

    TEAM = "team", "Team"
    PERSONAL = "personal", "Personal"


class Skill(models.Model):
    """One named procedure; its content is the current version's.

    A `team` skill is indexed in every chat. A `personal` one belongs to one Person (or, for an
    author no Person is linked to, one Actor) and is indexed only in chats whose one reader is
    that owner; a skill reviewer can promote it to the team."""

    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        STALE = "stale", "Stale"
        ARCHIVED = "archived", "Archived"

    slug = models.CharField(max_length=64, unique=True)
    # A path of slugs ("mlops/inference"), as the folders it was imported from show it.
    category = models.CharField(max_length=CATEGORY_LENGTH, blank=True, default="")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    pinned = models.BooleanField(default=False)
    # Copied from the current version so the prompt index needs no join over versions.
    description = models.CharField(max_length=1024, blank=True, default="")
    # Copied from the current version's `metadata.hermes.requires_tools` / `requires_toolsets`
    # ({"tools": [...], "toolsets": [...]}, skills.format.required_tools): the index reads
    # it with the description and checks a chat's tools only when some skill names any.
    required_tools = models.JSONField(default=dict, blank=True)
    current_version = models.ForeignKey(
        "SkillVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    # Where its content comes from: {"via": "command", "root": ..., "path": ...} for an
    # import (the import root and the skill folder under it), {"via": "agent", ...} when
    # the agent or a person created it; {} for skills made before origins were recorded.
    origin = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)
    # Slugs stay unique across scopes: a name means one skill wherever it is mentioned.
    scope = models.CharField(max_length=16, choices=Scope.choices, default=Scope.TEAM)
    owner_person = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="personal_skills",
    )
    owner_actor = models.ForeignKey(
        Actor, null=True, blank=True, on_delete=models.SET_NULL, related_name="personal_skills"
    )

    class Meta:
        ordering = ["slug"]
        indexes = [
            models.Index(fields=["status", "slug"], name="skill_status_slug"),
            models.Index(fields=["scope", "owner_person"], name="skill_scope_owner_person"),
            models.Index(fields=["scope", "owner_actor"], name="skill_scope_owner_actor"),
        ]
        constraints = [
            # A team skill has no owner; a personal one at most one (a Person or an Actor).
            # Deleting that owner leaves the skill personal with none: it reaches nobody's
            # prompt, and skill reviewers still see it (to promote or archive it).
            models.CheckConstraint(
                condition=(
                    models.Q(scope="team", owner_person__isnull=True, owner_actor__isnull=True)
                    | models.Q(scope="personal", owner_person__isnull=True)
                    | models.Q(scope="personal", owner_actor__isnull=True)
                ),
                name="skill_scope_has_its_owner",
            )
        ]

    def __str__(self) -> str:
        return self.slug


class SkillVersion(models.Model):
    """One immutable state of a skill's content."""

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="versions")
    number = models.PositiveIntegerField()
    change = models.CharField(max_length=16)  # create, patch, edit, file_write, … rollback
    skill_md = models.TextField()
    front_matter = models.JSONField(default=dict)
    files = models.JSONField(default=dict, blank=True)  # {"references/x.md": "text"}
    binaries = models.JSONField(default=dict, blank=True)  # {"assets/x.ttf": SkillBlob sha256}
    content_hash = models.CharField(max_length=64, db_index=True)
    author_actor = models.ForeignKey(
        Actor, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    author_person = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="skill_versions",
    )
    source_chat = models.ForeignKey(
        Chat, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source_turn = models.ForeignKey(
        Turn, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True, default="")
    origin = models.JSONField(default=dict, blank=True)  # an import's root and path
    # Files the change drew on (chats.work_sources): such a skill never reaches a wider
    # audience than the readers of their chat (skills.scope: never the team's).
    sources = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["skill", "number"]
        constraints = [
            models.UniqueConstraint(fields=["skill", "number"], name="skill_version_number_unique")
        ]

    def __str__(self) -> str:
        return f"{self.skill.slug} v{self.number}"


class SkillProposal(models.Model):
    """A change that waits for a skill reviewer: the full proposed content, bound to the
    version it was based on (`base_number`; none for a new skill)."""

    class Status(models.TextChoices):
        PENDING = "pending", "Waiting for a reviewer"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        SUPERSEDED = "superseded", "Superseded by another change"
        # Nobody decided it within SKILLS_PROPOSAL_TTL_DAYS, or its skill was archived.
        EXPIRED = "expired", "Expired"

    skill = models.ForeignKey(
        Skill, null=True, blank=True, on_delete=models.CASCADE, related_name="proposals"
    )
    slug = models.CharField(max_length=64)
    category = models.CharField(max_length=CATEGORY_LENGTH, blank=True, default="")
    action = models.CharField(max_length=16)  # create, patch, edit, delete, file_write, …
    base_number = models.PositiveIntegerField(null=True, blank=True)
    skill_md = models.TextField()
    front_matter = models.JSONField(default=dict)
    files = models.JSONField(default=dict, blank=True)
    content_hash = models.CharField(max_length=64)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    author_actor = models.ForeignKey(
        Actor, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    author_person = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="skill_proposals",
    )
    source_chat = models.ForeignKey(
        Chat, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    source_turn = models.ForeignKey(
        Turn, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    reason = models.TextField(blank=True, default="")
    sources = models.JSONField(default=list, blank=True)  # files it drew on, as SkillVersion's
    # Who made the change: the agent in a turn, a background review (`review` says which), or
    # the system (the curator's merges).
    via = models.CharField(max_length=16, choices=Via.choices, default=Via.AGENT)
    # The background review that proposed it, if one did.
    review = models.ForeignKey(
        "learning.Review",
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="skill_proposals",
    )
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    decided_at = models.DateTimeField(null=True, blank=True)
    result_version = models.ForeignKey(
        SkillVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["status", "created_at"], name="skill_proposal_status")]

    def __str__(self) -> str:
        return f"skill proposal #{self.pk} ({self.action} {self.slug})"

    @property
    def author_label(self) -> str:
        """Who proposed it, as pages and messages name them: by identity (the Person, the API
        token's owner, "Telegram user <id>"), the display name only as marked secondary text
        (`chats.labels`), else "the agent". select_related("author_actor__person") to show many;
        `_token_owners` (from `chats.labels.token_owner_names`) saves a query per API user."""
        label = identity_label(
            actor=self.author_actor,
            person=self.author_person,
            owners=getattr(self, "_token_owners", None),
        )
        return label or "the agent"

    @property
    def origin_label(self) -> str:
        """How pages name who proposed it when no person did: "proposed by the review after
        turn N", "proposed by the curator", or "" (select_related("review") to show many)."""
        if self.review_id is not None and self.review is not None:
            return self.review.origin_label
        if self.via == Via.SYSTEM:
            return "proposed by the curator"
        return ""


class SkillEvent(models.Model):
    """One line of the audit trail: who did what to which skill, with before/after."""

    class Kind(models.TextChoices):
        CREATE = "create", "Created"
        PATCH = "patch", "Patched"
        EDIT = "edit", "Edited"
        FILE_WRITE = "file_write", "File written"
        FILE_REMOVE = "file_remove", "File removed"
        ARCHIVE = "archive", "Archived"
        RESTORE = "restore", "Restored"
        ROLLBACK = "rollback", "Rolled back"
        PIN = "pin", "Pinned"
        UNPIN = "unpin", "Unpinned"
        IMPORT = "import", "Imported"
        PROPOSED = "proposed", "Proposed"
        BLOCKED = "blocked", "Blocked by the scanner"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        # The curator (learning.curator, via=system): unused too long, or loaded again.
        STALE = "stale", "Marked stale"
        REACTIVATE = "reactivate", "Reactivated"
        EXPIRED = "expired", "Proposal expired"  # skills.expiry, via=system
        # A skill reviewer made a personal skill a team skill.
        PROMOTE = "promote", "Promoted to the team"

    skill = models.ForeignKey(
        Skill, null=True, blank=True, on_delete=models.CASCADE, related_name="events"
    )
    slug = models.CharField(max_length=64)  # also for a blocked create that left no skill
    kind = models.CharField(max_length=16, choices=Kind.choices)
    via = models.CharField(max_length=16, choices=Via.choices)
    version = models.ForeignKey(
        SkillVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    proposal = models.ForeignKey(
        SkillProposal, null=True, blank=True, on_delete=models.SET_NULL, related_name="events"
    )
    actor = models.ForeignKey(
        Actor, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    person = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="skill_events",
    )
    chat = models.ForeignKey(
        Chat, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    turn = models.ForeignKey(
        Turn, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    path = models.CharField(max_length=255, blank=True, default="")  # SKILL.md or a file
    before = models.TextField(blank=True, default="")
    after = models.TextField(blank=True, default="")
    detail = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["created_at", "id"]

    def __str__(self) -> str:
        return f"{self.get_kind_display()} {self.slug} ({self.created_at:%Y-%m-%d %H:%M})"


class SkillUsage(models.Model):
    """A turn loaded a skill (`skill_view` of its body or of one file). The outcome is the
    turn's, read when shown (completed / failed / interrupted, and whether a tool failed)."""

    skill = models.ForeignKey(Skill, on_delete=models.CASCADE, related_name="usages")
    version = models.ForeignKey(
        SkillVersion, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    path = models.CharField(max_length=255, blank=True, default="")  # "" = SKILL.md
    chat = models.ForeignKey(
        Chat, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    turn = models.ForeignKey(
        Turn, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    actor = models.ForeignKey(
        Actor, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["skill", "created_at"], name="skill_usage_skill_time")]

    def __str__(self) -> str:
        return f"{self.skill.slug} used ({self.created_at:%Y-%m-%d %H:%M})"
