"""Approval sections: apps whose changes wait for a person plug into the one Approvals page
and its badge, as tools and prompt sections plug into the engine.

The Approvals page shows every registered section that has a template, in `order`; the badge
in the navigation counts what waits for the person in all of them. A section decides itself
who sees what: `count` and `context` get the person and must return nothing they may not
decide. Apps register in `AppConfig.ready()`; `chats` never imports them.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ApprovalSection:
    name: str
    count: Callable[[Any], int]  # how many decisions wait for this person
    template: str = ""  # renders the section ("app/page.html#partial"); "" = the page's own
    context: Callable[[Any], dict] | None = None  # the template's context for this person
    order: int = 100


_sections: dict[str, ApprovalSection] = {}


def register_approval_section(section: ApprovalSection) -> None:
    """Add (or replace, by name) a section of the Approvals page and its badge."""
    _sections[section.name] = section


def approval_sections() -> list[ApprovalSection]:
    """The registered sections, in page order."""
    return sorted(_sections.values(), key=lambda section: (section.order, section.name))


def approvals_pending_count(person) -> int:
    """Decisions waiting for `person` across every section (0 for anonymous people)."""
    if person is None or not getattr(person, "is_authenticated", False):
        return 0
    return sum(section.count(person) for section in approval_sections())
