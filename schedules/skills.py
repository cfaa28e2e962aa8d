"""Skills that schedules use, for the curator (`learning.curator.referenced_skills_register`):
a skill an enabled schedule's prompt names is never marked stale nor archived, however
long people leave it alone, because the schedule will need it at its next run.

A prompt names a skill as `/slug` (the slash command) or by its slug as a word
("use weekly-report"). Words are matched against the skills that exist, so the curator
gets real slugs only, in one query whatever the number of schedules.
"""

import re

from schedules.models import Schedule

# A skill slug as skills.format.NAME_RE allows it, optionally after a slash; a word
# boundary on both sides so "report" does not match inside "reports".
WORD_RE = re.compile(r"(?<![a-z0-9._-])/?([a-z0-9][a-z0-9._-]{0,63})(?![a-z0-9_-])")


def slug_candidates(text: str) -> set[str]:
    """Every word of `text` that could be a skill slug (lower case, trailing dots dropped)."""
    return {match.group(1).rstrip(".") for match in WORD_RE.finditer(text.casefold())} - {""}


def skills_in_schedules() -> set[str]:
    """Slugs of existing skills named in the prompts of enabled schedules (paused and
    pending ones protect nothing: they may never run again)."""
    prompts = Schedule.objects.filter(enabled=True).values_list("prompt", flat=True)
    candidates: set[str] = set()
    for prompt in prompts.iterator():
        candidates |= slug_candidates(prompt)
    if not candidates:
        return set()
    try:
        from skills.models import Skill
    except ImportError:  # no skills app: every candidate is kept (harmless, never archived)
        return candidates
    found = set()
    ordered = sorted(candidates)
    for start in range(0, len(ordered), 500):  # SQLite's bound on query parameters
        found.update(
            Skill.objects.filter(slug__in=ordered[start : start + 500]).values_list(
                "slug", flat=True
            )
        )
    return found
