"""One scan: the direct rules on the text, then the same rules on what the text hides
(look-alike letters read as Latin, spelled-out words joined, tag characters, variation
selectors and encoded runs decoded), every finding mapped back to original offsets.

Cheap checks come first: ASCII text skips everything Unicode, and each rewrite is made only
when the text has something it would rewrite, so an ordinary fact pays for a few regex
searches beyond the direct rules.
"""

from __future__ import annotations

from collections.abc import Iterable

from hermes_site.scanning.commands import _command_findings, _url_findings
from hermes_site.scanning.confusables import skeleton_view
from hermes_site.scanning.credentials import _secret_findings
from hermes_site.scanning.destructive import DESTRUCTIVE_CHECKS
from hermes_site.scanning.encoded import encoded_payloads
from hermes_site.scanning.execution import EXECUTION_CHECKS
from hermes_site.scanning.harvesting import HARVESTING_CHECKS
from hermes_site.scanning.hidden import (
    Run,
    hidden_findings,
    hidden_runs,
    selector_payloads,
    tag_payload,
)
from hermes_site.scanning.normalise import Normalised, Payload, continuations_joined, normalise
from hermes_site.scanning.persistence import PERSISTENCE_CHECKS
from hermes_site.scanning.phrases import _TEXT_RULES as _ENGLISH_AND_CHINESE
from hermes_site.scanning.phrases import _Rule
from hermes_site.scanning.phrases_intl import INTL_RULES
from hermes_site.scanning.result import Raw, render_excerpt, secret_spans
from hermes_site.scanning.shell import Checks
from hermes_site.scanning.shellview import shell_views
from hermes_site.scanning.spelling import SQUASHED_RULES, spelled_views

# Decoding inside decoded text: base64 of base64 is decoded, a third layer is not.
MAX_DEPTH = 2
LOOK_ALIKE = " (written with look-alike letters)"
SPELLED = " (spelled with separators or digits)"
AS_THE_SHELL_READS = " (after the shell's quotes, ${IFS} and variables are read)"
_TEXT_RULES = _ENGLISH_AND_CHINESE + INTL_RULES
_SPELLED_RULES = _ENGLISH_AND_CHINESE + SQUASHED_RULES
SHELL_CHECKS = Checks(DESTRUCTIVE_CHECKS, EXECUTION_CHECKS, HARVESTING_CHECKS, PERSISTENCE_CHECKS)


def scan_raw(
    text: str,
    *,
    kind: str = "memory",
    depth: int = 0,
    file_starts: frozenset[int] = frozenset(),
) -> tuple[list[Raw], set[int]]:
    """Every finding in `text` (overlaps included) and the positions of legitimate hidden
    characters, which excerpts leave as they are; `kind` selects the shell checks that apply
    (some are for skills only); `file_starts` are where the files of a joined text begin (a
    byte-order mark there is legitimate, see `hidden.py`)."""
    runs = hidden_runs(text, file_starts)
    quiet = {pos for run in runs if run.kind is None for pos in range(run.start, run.end)}
    raw: list[Raw] = [(*f, None) for f in hidden_findings(text, runs, redact=redact_secrets)]
    norm = normalise(text)
    raw.extend(_view_findings(norm, _TEXT_RULES, "", commands=True, kind=kind))
    raw.extend((*f, None) for f in _secret_findings(text))
    skeleton = skeleton_view(norm)
    if skeleton is not None:
        raw.extend(_view_findings(skeleton, _TEXT_RULES, LOOK_ALIKE, commands=True, kind=kind))
    for view in shell_views(continuations_joined(norm)):
        raw.extend(_view_findings(view, (), AS_THE_SHELL_READS, commands=True, kind=kind))
    for view in spelled_views(skeleton or norm):
        raw.extend(
            # English and Chinese only: the spelled copies cost a full pass of rules each.
            _view_findings(view, _SPELLED_RULES, SPELLED, commands=False, kind=kind)
        )
    if depth < MAX_DEPTH:
        for how, payload in _payloads(text, runs):
            raw.extend(_payload_findings(payload, how, depth, kind))
    return raw, quiet


def _view_findings(
    view: Normalised, rules: Iterable[_Rule], suffix: str, *, commands: bool, kind: str
) -> list[Raw]:
    out: list[Raw] = []
    text = view.text
    for rule in rules:
        if rule.triggers and not any(t in text for t in rule.triggers):
            continue
        for m in rule.finditer(text):
            start, end = view.span(m.start(), m.end())
            out.append((rule.category, rule.reason + suffix, start, end, False, None))
    if commands:
        lines = continuations_joined(view)
        for category, reason, start, end, redact in (
            *_command_findings(lines),
            *_url_findings(lines),
            *SHELL_CHECKS.run(lines, kind),
        ):
            out.append((category, reason + suffix, start, end, redact, None))
    return out


def _payloads(text: str, runs: list[Run]) -> list[tuple[str, Payload]]:
    out = []
    tags = tag_payload(text, runs)
    if tags is not None:
        decoded, positions = tags
        out.append(("in hidden tag characters", Payload(decoded, [(p, p + 1) for p in positions])))
    for decoded, sources in selector_payloads(text, runs):
        out.append(("in variation selectors", Payload(decoded, sources)))
    for how, decoded, sources in encoded_payloads(text):
        out.append((f"decoded from {how}", Payload(decoded, sources)))
    return out


def _payload_findings(payload: Payload, how: str, depth: int, kind: str) -> list[Raw]:
    """The payload scanned as text of its own; excerpts show the decoded text."""
    inner, quiet = scan_raw(payload.text, kind=kind, depth=depth + 1)
    secrets = secret_spans(inner)
    out: list[Raw] = []
    for category, reason, start, end, redact, excerpt in inner:
        if excerpt is None:
            excerpt = render_excerpt(
                payload.text, start, end, redact=redact, quiet=quiet, secrets=secrets
            )
        out.append((category, f"{reason} ({how})", *payload.span(start, end), redact, excerpt))
    return out


def redact_secrets(payload: str) -> str:
    """`payload` with every credential replaced, for reasons that quote decoded text."""
    spans = [(start, end) for _, _, start, end, _ in _secret_findings(payload)]
    for start, end in sorted(spans, reverse=True):
        payload = payload[:start] + "[redacted]" + payload[end:]
    return payload
