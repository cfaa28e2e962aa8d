"""The skills curator: skills nobody uses fade out of the index, overlapping ones are offered
to a reviewer for merging. Run periodically by `learning.tasks.run_curator`.

Status: a skill unused for LEARNING_CURATOR_STALE_DAYS becomes `stale` (still listed), for
LEARNING_CURATOR_ARCHIVE_DAYS `archived` (out of the index; a reviewer restores it). Its
age counts from the latest of: its last use by a turn (a SkillUsage; a background review's
view is none), its current version (an import, edit or rollback makes it fresh), a
reviewer's restore, and the curator's own first run on this hub (`CuratorState`), so a hub
that switches the curator on gives every skill the full grace period. Pinned skills and
skills something references (see `referenced_skills_register`) are never marked, and a stale
one of them is active again.
Each change runs under the skill's row lock with one SkillEvent (via=system) in the same
transaction, and is decided again under the lock, so a second or concurrent run changes
nothing more. Nothing is deleted: versions and usages are never touched.

Merges (LEARNING_CURATOR_MERGES): pairs of active or stale team skills (personal ones are
never merged) whose name + description and whose bodies are both at least
LEARNING_CURATOR_MERGE_SIMILARITY alike (rapidfuzz token_sort_ratio, 0-100) are proposed
for merging, the less used into the more used (a pinned or referenced skill is always the
one kept): an `edit` of the kept skill whose body gains a marked section with the other's
body (and its supporting files), and a `delete` (archive) of the other. Both are ordinary
SkillProposals through `skills.services` (validated, scanned strictly) that always wait for
a skill reviewer, whatever SKILLS_APPROVAL says. A pair with a pending or rejected merge
proposal is not proposed again.
"""

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Count, F, OuterRef, QuerySet, Subquery
from django.utils import timezone
from rapidfuzz import fuzz, utils

from learning.models import CuratorState
from skills.format import SkillFormatError, split_front_matter
from skills.models import Scope, Skill, SkillEvent, SkillProposal, SkillUsage, Via
from skills.services import Author, Kind, _cut, _event, _lock, skill_propose

logger = logging.getLogger(__name__)

Status = Skill.Status
# Bodies are compared on their first characters only, so a run stays cheap with long skills.
BODY_COMPARE_CHARS = 20_000
MERGE_MARK = re.compile(r"\[merge:([a-z0-9][a-z0-9._-]*)\+([a-z0-9][a-z0-9._-]*)\]")

# --- Skills something references ---------------------------------------------------------

ReferencedSkills = Callable[[], Iterable[str]]
_providers: dict[str, ReferencedSkills] = {}


def referenced_skills_register(name: str, provider: ReferencedSkills) -> None:
    """Add (or replace, by name) a provider of the slugs of skills something depends on: the
    curator never marks them stale or archives them, and keeps them in a merge. Schedules
    register theirs in their AppConfig.ready() (`schedules.skills.skills_in_schedules`)."""
    _providers[name] = provider


def referenced_skills_unregister(name: str) -> None:
    """Remove a provider registered under `name` (nothing if there is none)."""
    _providers.pop(name, None)


def referenced_skill_slugs() -> set[str]:
    """Every slug the registered providers reference (a provider's error propagates: the
    curator then changes nothing rather than archive a skill something needs)."""
    slugs: set[str] = set()
    for name in sorted(_providers):
        slugs.update(str(slug) for slug in _providers[name]())
    return slugs


# --- The report --------------------------------------------------------------------------


@dataclass
class CuratorReport:
    """What one run did (slugs), and what it could not do."""

    checked: int = 0
    stale: list[str] = field(default_factory=list)
    archived: list[str] = field(default_factory=list)
    reactivated: list[str] = field(default_factory=list)
    merges: list[tuple[str, str]] = field(default_factory=list)  # (kept, absorbed) proposed
    merges_blocked: list[tuple[str, str]] = field(default_factory=list)  # by the scanner
    merges_refused: list[tuple[str, str, str]] = field(default_factory=list)  # (…, why)
    error: str = ""

    @property
    def changed(self) -> bool:
        return bool(
            self.stale or self.archived or self.reactivated or self.merges or self.merges_blocked
        )

    def summary(self) -> str:
        parts = [
            f"{label} {', '.join(slugs)}"
            for label, slugs in (
                ("marked stale", self.stale),
                ("archived", self.archived),
                ("reactivated", self.reactivated),
                ("proposed merges", [f"{b} into {a}" for a, b in self.merges]),
                ("blocked merges", [f"{b} into {a}" for a, b in self.merges_blocked]),
            )
            if slugs
        ]
        if self.error:
            parts.append(f"error: {self.error}")
        checked = f"{self.checked} skill{'' if self.checked == 1 else 's'} checked"
        return "; ".join(parts) or f"nothing to do ({checked})"


# --- Status ------------------------------------------------------------------------------


def _with_activity(skills: QuerySet[Skill]) -> QuerySet[Skill]:
    """`skills` with when each was last used, last changed and last restored."""
    latest_use = SkillUsage.objects.filter(skill=OuterRef("pk")).order_by("-created_at")
    # A person bringing a skill back (from the archive, or from stale) restarts its clock.
    latest_restore = (
        SkillEvent.objects.filter(skill=OuterRef("pk"), kind__in=[Kind.RESTORE, Kind.REACTIVATE])
        .exclude(via=Via.SYSTEM)
        .order_by("-created_at")
    )
    return skills.annotate(
        last_used=Subquery(latest_use.values("created_at")[:1]),
        last_change=F("current_version__created_at"),
        last_restore=Subquery(latest_restore.values("created_at")[:1]),
    )


def curator_first_run(*, now: datetime) -> datetime:
    """When the curator first ran on this hub: recorded as `now` by the first run that asks
    (once, even when two runs race), read back by every later one."""
    started = curator_started_at()
    if started is not None:
        return started
    try:
        with transaction.atomic():
            CuratorState.objects.create(pk=1, first_run_at=now)
        return now
    except IntegrityError:  # another run recorded it first: theirs counts
        return CuratorState.objects.get(pk=1).first_run_at


def curator_started_at() -> datetime | None:
    """When the curator first ran on this hub, or None before its first run."""
    return CuratorState.objects.filter(pk=1).values_list("first_run_at", flat=True).first()


def _idle_since(skill: Skill, first_run: datetime) -> tuple[str, datetime]:
    """(what, when) the skill's idle time counts from: the latest of its last use, its
    current version, a person's restore, and the curator's first run."""
    since = {
        "use": skill.last_used,
        "change": skill.last_change,
        "restore": skill.last_restore,
        "curator": first_run,
    }
    return max(
        ((name, moment) for name, moment in since.items() if moment is not None),
        key=lambda item: item[1],
    )


def _decide(
    skill: Skill, *, referenced: set[str], now: datetime, first_run: datetime
) -> tuple[str, dict]:
    """The status `skill` should have, and the audit details that explain it."""
    stale_days = settings.LEARNING_CURATOR_STALE_DAYS
    archive_days = settings.LEARNING_CURATOR_ARCHIVE_DAYS
    counted_from, reference = _idle_since(skill, first_run)
    unused = max(now - reference, timedelta(0))
    detail = {
        "days_unused": unused.days,
        "counted_from": counted_from,
        "last_used": skill.last_used.isoformat() if skill.last_used else None,
        "last_change": skill.last_change.isoformat(),
        "curator_first_run": first_run.isoformat(),
        "stale_days": stale_days,
        "archive_days": archive_days,
    }
    if skill.last_restore is not None:
        detail["last_restore"] = skill.last_restore.isoformat()
    if skill.pinned or skill.slug in referenced:
        detail["reason"] = "pinned" if skill.pinned else "referenced"
        return Status.ACTIVE, detail
    if unused >= timedelta(days=archive_days):
        detail["reason"] = f"unused for {archive_days} days or more"
        return Status.ARCHIVED, detail
    if unused >= timedelta(days=stale_days):
        detail["reason"] = f"unused for {stale_days} days or more"
        return Status.STALE, detail
    detail["reason"] = f"used within {stale_days} days"
    return Status.ACTIVE, detail


EVENT_OF_STATUS = {
    Status.STALE: Kind.STALE,
    Status.ARCHIVED: Kind.ARCHIVE,
    Status.ACTIVE: Kind.REACTIVATE,
}


def _curate_one(
    slug: str, *, referenced: set[str], now: datetime, first_run: datetime
) -> str | None:
    """Bring one skill to the status it should have, under its row lock; the new status, or
    None when it already had it (or left the curator's reach meanwhile)."""
    with transaction.atomic():
        skill = _lock(slug)
        if skill is None or skill.status == Status.ARCHIVED or skill.current_version_id is None:
            return None
        # Read after the lock: a use committed by a turn meanwhile is seen here.
        skill = _with_activity(Skill.objects.filter(pk=skill.pk)).get()
        wanted, detail = _decide(skill, referenced=referenced, now=now, first_run=first_run)
        if wanted == skill.status:
            return None
        detail.update({"from": skill.status, "to": wanted})
        skill.status, skill.updated_at = wanted, now
        skill.save(update_fields=["status", "updated_at"])
        _event(
            kind=EVENT_OF_STATUS[wanted],
            slug=slug,
            author=Author(via=Via.SYSTEM),
            skill=skill,
            version=skill.current_version,
            detail=detail,
        )
        return wanted


def _curate_statuses(
    report: CuratorReport, *, referenced: set[str], now: datetime, first_run: datetime
) -> None:
    skills = _with_activity(
        Skill.objects.filter(
            status__in=(Status.ACTIVE, Status.STALE), current_version__isnull=False
        ).order_by("slug")
    )
    for skill in skills:
        report.checked += 1
        wanted, _ = _decide(skill, referenced=referenced, now=now, first_run=first_run)
        if wanted == skill.status:
            continue  # decided again under the lock only when something may change
        changed = _curate_one(skill.slug, referenced=referenced, now=now, first_run=first_run)
        if changed == Status.STALE:
            report.stale.append(skill.slug)
        elif changed == Status.ARCHIVED:
            report.archived.append(skill.slug)
        elif changed == Status.ACTIVE:
            report.reactivated.append(skill.slug)


# --- Merges ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Candidate:
    slug: str
    number: int
    description: str
    body: str
    files: dict
    protected: bool  # pinned or referenced: never the one archived
    uses: int
    last_used: datetime | None
    created_at: datetime

    @property
    def usage_rank(self) -> tuple:
        # More used first, then more recently used, then the older skill, then by name.
        last = self.last_used.timestamp() if self.last_used else 0.0
        return (-self.uses, -last, self.created_at, self.slug)


def _pair_mark(a: str, b: str) -> str:
    first, second = sorted((a, b))
    return f"[merge:{first}+{second}]"


def _system_merges(statuses: Iterable[str]) -> QuerySet[SkillProposal]:
    """The curator's merge proposals (made via=system) with one of these statuses."""
    return SkillProposal.objects.filter(
        status__in=list(statuses), via=Via.SYSTEM, reason__contains="[merge:"
    )


def _candidates(*, referenced: set[str]) -> list[_Candidate]:
    busy: set[str] = set()  # in a merge that still waits: one at a time per skill
    for reason in _system_merges([SkillProposal.Status.PENDING]).values_list("reason", flat=True):
        for match in MERGE_MARK.finditer(reason):
            busy.update(match.groups())
    skills = (
        _with_activity(
            # Team skills only: a merge must never move a personal skill's text into the team's
            # (or a team skill into someone's own) behind a one-line proposal.
            Skill.objects.filter(
                status__in=(Status.ACTIVE, Status.STALE),
                current_version__isnull=False,
                scope=Scope.TEAM,
            )
        )
        .exclude(slug__in=busy)
        .annotate(uses=Count("usages"))
        .select_related("current_version")
        .order_by("slug")
    )
    candidates = []
    for skill in skills:
        version = skill.current_version
        try:
            body = split_front_matter(version.skill_md)[1]
        except SkillFormatError:
            continue
        candidates.append(
            _Candidate(
                slug=skill.slug,
                number=version.number,
                description=skill.description,
                body=body,
                files=version.files,
                protected=skill.pinned or skill.slug in referenced,
                uses=skill.uses,
                last_used=skill.last_used,
                created_at=skill.created_at,
            )
        )
    return candidates


def _known_marks() -> set[str]:
    """The pairs whose merge is pending or was rejected: never proposed again."""
    statuses = [SkillProposal.Status.PENDING, SkillProposal.Status.REJECTED]
    marks = set()
    for reason in _system_merges(statuses).values_list("reason", flat=True):
        marks.update(match.group(0) for match in MERGE_MARK.finditer(reason))
    return marks


def _overlapping(candidates: list[_Candidate]) -> list[tuple[_Candidate, _Candidate, dict]]:
    """(kept, absorbed, scores) of each overlapping pair not proposed before, best first,
    each skill in one pair at most."""
    known = _known_marks()
    threshold = settings.LEARNING_CURATOR_MERGE_SIMILARITY
    heads = [f"{c.slug.replace('-', ' ')} {c.description}" for c in candidates]
    bodies = [c.body[:BODY_COMPARE_CHARS] for c in candidates]
    scored = []
    for i, a in enumerate(candidates):
        for j in range(i + 1, len(candidates)):
            b = candidates[j]
            if (a.protected and b.protected) or _pair_mark(a.slug, b.slug) in known:
                continue  # neither may be archived, or a reviewer has it or said no
            head = fuzz.token_sort_ratio(
                heads[i], heads[j], processor=utils.default_process, score_cutoff=threshold
            )
            if not head:
                continue
            body = fuzz.token_sort_ratio(
                bodies[i], bodies[j], processor=utils.default_process, score_cutoff=threshold
            )
            if not body:
                continue
            scores = {"description": round(head), "body": round(body)}
            scored.append((min(head, body), a.slug, b.slug, a, b, scores))
    scored.sort(key=lambda row: (-row[0], row[1], row[2]))
    pairs, taken = [], set()
    for _, _, _, a, b, scores in scored:
        if a.slug in taken or b.slug in taken:
            continue
        taken.update((a.slug, b.slug))
        if a.protected or b.protected:
            kept, absorbed = (a, b) if a.protected else (b, a)
        else:
            kept, absorbed = sorted((a, b), key=lambda c: c.usage_rank)
        pairs.append((kept, absorbed, scores))
    return pairs


def merged_content(kept_md: str, kept_files: dict, absorbed: _Candidate) -> tuple[str, dict]:
    """The kept skill's SKILL.md with a marked section holding the absorbed skill's body, and
    its files with the absorbed one's added (a path both have with other text stays with the
    archived skill, and the section says so). Mechanical and deterministic."""
    files = dict(kept_files)
    left_behind = []
    for path, text in sorted(absorbed.files.items()):
        if path not in files:
            files[path] = text
        elif files[path] != text:
            left_behind.append(path)
    lines = [
        kept_md.rstrip("\n"),
        "",
        f"## Merged from {absorbed.slug}",
        "",
        f"The curator merged the overlapping skill `{absorbed.slug}` (version {absorbed.number}) "
        f"into this one. Its description: {absorbed.description}",
        "",
        absorbed.body.strip("\n"),
        "",
    ]
    if left_behind:
        lines += [
            f"Files of `{absorbed.slug}` not copied (this skill has other text at the same "
            f"path; they stay in its archived versions): {', '.join(left_behind)}",
            "",
        ]
    lines += [f"(End of the part merged from `{absorbed.slug}`.)", ""]
    return "\n".join(lines), files


def _propose_merge(
    report: CuratorReport, kept: _Candidate, absorbed: _Candidate, scores: dict
) -> None:
    """Propose one merge under both skills' row locks (taken in name order), unless a pending
    or rejected proposal for the pair exists or this exact merge was blocked before."""
    mark = _pair_mark(kept.slug, absorbed.slug)
    reason = (
        f"Curator merge {mark}: {absorbed.slug} overlaps {kept.slug} (name and description "
        f"{scores['description']}% alike, body {scores['body']}%); {kept.slug} (used "
        f"{kept.uses} times) gains the body of {absorbed.slug} (used {absorbed.uses} times), "
        f"which is archived."
    )
    author = Author(via=Via.SYSTEM, reason=reason)
    pair = (kept.slug, absorbed.slug)
    with transaction.atomic():
        locked = {
            skill.slug: skill
            for skill in Skill.objects.select_for_update().filter(slug__in=pair).order_by("slug")
        }
        for candidate in (kept, absorbed):
            skill = locked.get(candidate.slug)
            if (
                skill is None
                or skill.status == Status.ARCHIVED
                or skill.current_version is None
                or skill.current_version.number != candidate.number
            ):
                return  # changed since this run looked: the next run sees it afresh
        statuses = [SkillProposal.Status.PENDING, SkillProposal.Status.REJECTED]
        if _system_merges(statuses).filter(reason__contains=mark).exists():
            return
        current = locked[kept.slug].current_version
        content, files = merged_content(current.skill_md, current.files, absorbed)
        if SkillEvent.objects.filter(
            skill=locked[kept.slug],
            kind=Kind.BLOCKED,
            via=Via.SYSTEM,
            version=current,
            after=_cut(content),  # as the blocked event stored it
        ).exists():
            return  # the scanner refused this very merge before; a change of either retries
        edit = skill_propose(
            name=kept.slug,
            action="edit",
            content=content,
            files=files,
            author=author,
            base_version=kept.number,
        )
        if edit.code == "blocked":
            report.merges_blocked.append(pair)
            return
        if edit.code != "proposed":
            report.merges_refused.append((*pair, edit.message))
            return
        delete = skill_propose(
            name=absorbed.slug, action="delete", author=author, base_version=absorbed.number
        )
        if delete.code != "proposed":
            # Never half a merge: the edit proposal goes too.
            transaction.set_rollback(True)
            report.merges_refused.append((*pair, delete.message))
            return
        report.merges.append(pair)


def _curate_merges(report: CuratorReport, *, referenced: set[str]) -> None:
    for kept, absorbed, scores in _overlapping(_candidates(referenced=referenced)):
        _propose_merge(report, kept, absorbed, scores)


# --- The run -----------------------------------------------------------------------------


def curator_run(*, now: datetime | None = None) -> CuratorReport:
    """One pass over the skills: mark stale, archive, reactivate (each change once, under the
    skill's row lock, with a via=system event; idle time counts from the curator's first run
    at the earliest, recorded by the first run) and, when LEARNING_CURATOR_MERGES is on,
    propose merges that wait for a skill reviewer. Idempotent; deletes nothing."""
    now = now or timezone.now()
    report = CuratorReport()
    try:
        referenced = referenced_skill_slugs()
    except Exception as exc:  # noqa: BLE001 - unknown references: change nothing
        logger.exception("curator: a referenced-skills provider failed; nothing was changed")
        report.error = f"a referenced-skills provider failed: {exc}"
        return report
    first_run = curator_first_run(now=now)
    _curate_statuses(report, referenced=referenced, now=now, first_run=first_run)
    CuratorState.objects.filter(pk=1).update(last_run_at=now)
    if settings.LEARNING_CURATOR_MERGES:
        _curate_merges(report, referenced=referenced)
    if report.changed:
        logger.info("curator: %s", report.summary())
    return report


# --- When a skill will fade (the skill page) ---------------------------------------------


@dataclass(frozen=True)
class StaleForecast:
    """What the curator will do to a skill nobody uses, and from when: `becomes` is "stale"
    (an active skill) or "archived" (a stale one)."""

    becomes: str
    on: datetime


def skill_stale_forecast(skill: Skill, *, now: datetime | None = None) -> StaleForecast | None:
    """When the curator will mark `skill` stale (a stale one: archive it) unless a turn uses
    it, by the rule the curator applies (`_idle_since`; before the curator's first run, its
    count can start no earlier than now). None for pinned, referenced and archived skills, a
    skill without content, or with the curator off."""
    if settings.LEARNING_CURATOR_INTERVAL_HOURS <= 0:
        return None
    if skill.pinned or skill.status == Status.ARCHIVED or skill.current_version_id is None:
        return None
    try:
        if skill.slug in referenced_skill_slugs():
            return None
    except Exception:  # noqa: BLE001 - the curator changes nothing then; nothing to forecast
        return None
    now = now or timezone.now()
    annotated = _with_activity(Skill.objects.filter(pk=skill.pk)).first()
    if annotated is None:
        return None
    _, since = _idle_since(annotated, curator_started_at() or now)
    if skill.status == Status.STALE:
        return StaleForecast(
            "archived", since + timedelta(days=settings.LEARNING_CURATOR_ARCHIVE_DAYS)
        )
    return StaleForecast("stale", since + timedelta(days=settings.LEARNING_CURATOR_STALE_DAYS))


def skill_stale_note(skill: Skill) -> str:
    """The skill page's line on it: "Becomes stale on 2027-01-05 unless used." (archived, for
    a stale skill), "" when nothing will happen to it (see `skill_stale_forecast`)."""
    forecast = skill_stale_forecast(skill)
    if forecast is None:
        return ""
    verb = "Becomes stale" if forecast.becomes == "stale" else "Archived"
    if forecast.on <= timezone.now():
        return f"{verb} at the curator's next run unless used before."
    return f"{verb} on {timezone.localtime(forecast.on):%Y-%m-%d} unless used."
