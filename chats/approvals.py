"""Approval sections: apps whose changes wait for a person plug into the one Approvals page
and its badge, as tools and prompt sections plug into the engine.

The Approvals page shows every registered section that has a template, in `order`; the badge
in the navigation and the page's "N waiting" count what waits for the person in all of them
(one count). A section decides itself who sees what: `count` and `context` get the person and
must return nothing they may not decide. A section whose items carry a box for the page's
"Approve selected / Reject selected" names the form field of those boxes (`bulk_field`) and
decides them (`bulk_decide`), each bound to the version the page showed. Apps register in
`AppConfig.ready()`; `chats` never imports them.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class BulkOutcome:
    """What a section did with the ticked items of one bulk decision."""

    done: int = 0  # decided as asked
    failures: list[str] = field(default_factory=list)  # one line per item left undecided


class BulkInvalid(ValueError):
    """Ticked values a section cannot read (the message says so): nothing is decided."""


@dataclass(frozen=True)
class ApprovalSection:
    name: str
    count: Callable[[Any], int]  # how many decisions wait for this person
    template: str = ""  # renders the section ("app/page.html#partial"); "" = the page's own
    context: Callable[[Any], dict] | None = None  # the template's context for this person
    order: int = 100
    # The page's bulk decisions: the form field of the section's boxes; `bulk_parse` reads
    # their values (raising BulkInvalid before anything is decided), `bulk_decide(person,
    # decision, parsed)` decides each as the person, bound to the version shown.
    bulk_field: str = ""
    bulk_parse: Callable[[list[str]], list] | None = None
    bulk_decide: Callable[[Any, str, list], BulkOutcome] | None = None


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


def bulk_sections() -> list[ApprovalSection]:
    """The sections whose items the page's bulk decisions cover, in page order."""
    return [section for section in approval_sections() if section.bulk_field]
