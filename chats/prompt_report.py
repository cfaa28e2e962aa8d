"""The prompt report of a turn as HTML: tokens per part of the prompt (a section also says
whether it was cut and what it reported about itself, e.g. the skills it listed and left
out) and, per history message, whether the model saw it (included, cut) or not (dropped,
summarised). Shown in the admin and on the dashboard's context view, so "why did it forget
X?" has an answer."""

from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe


def render_prompt_report(report: dict) -> str:
    if not report:
        return "No report: the turn did not reach the model."
    tokens = report.get("tokens", {})
    budget = report.get("budget", {})
    sections = {
        section.get("name"): section
        for section in report.get("sections", [])
        if isinstance(section, dict)
    }
    rows = [
        ("system prompt", tokens.get("system", 0)),
        *(
            (_section_label(name, sections.get(name)), count)
            for name, count in tokens.get("sections", {}).items()
        ),
        ("summary", tokens.get("summary", 0)),
        ("history", tokens.get("history", 0)),
        ("current message", tokens.get("current", 0)),
        ("tool specs", tokens.get("tools", 0)),
        ("total sent", tokens.get("total", 0)),
    ]
    parts = [
        format_html(
            "<p>Window {} tokens, input limit {}, reply reserve {}.</p>",
            budget.get("window", "?"),
            budget.get("input_limit", "?"),
            budget.get("reply_reserve", "?"),
        ),
        format_html("<table><tr><th>part</th><th>tokens</th></tr>{}</table>", _rows(rows)),
    ]
    columns = report.get("history_columns", ["id", "role", "tokens", "status"])
    by_status: dict[str, list[str]] = {}
    for row in report.get("history", []):
        entry = dict(zip(columns, row, strict=False))
        by_status.setdefault(str(entry.get("status")), []).append(str(entry.get("id")))
    trigger = report.get("trigger") or {}
    if trigger:
        by_status.setdefault(f"current message ({trigger.get('status')})", []).append(
            str(trigger.get("id"))
        )
    summary = report.get("summary")
    if summary:
        by_status.setdefault("summarised", []).append(
            f"{summary['covers_from_id']}–{summary['covers_to_id']} (summary #{summary['id']})"
        )
    older = report.get("older_dropped")
    if older:
        by_status.setdefault("dropped (older, not read)", []).append(
            f"{older.get('after_id')}–{older.get('before_id')}"
        )
    status_rows = [(status, ", ".join(ids)) for status, ids in by_status.items()]
    parts.append(
        format_html("<table><tr><th>messages</th><th>ids</th></tr>{}</table>", _rows(status_rows))
    )
    return mark_safe("".join(parts))  # every part was built by format_html  # noqa: S308


def _section_label(name: str, section: dict | None) -> str:
    """ "section: skills (cut from 1190; left out 39, listed 17)": how the engine fitted the
    section, then what the section said about itself (its `details`)."""
    notes = []
    if section:
        if section.get("status") == "cut":
            notes.append(f"cut from {section.get('original_tokens')}")
        elif section.get("status") == "omitted":
            notes.append(f"left out, {section.get('original_tokens')} tokens")
        details = section.get("details")
        if isinstance(details, dict) and details:
            # By name: PostgreSQL's jsonb does not keep the order a section wrote them in.
            pairs = sorted((str(key).replace("_", " "), value) for key, value in details.items())
            notes.append(", ".join(f"{key} {value}" for key, value in pairs))
    return f"section: {name} ({'; '.join(notes)})" if notes else f"section: {name}"


def _rows(rows) -> str:
    return format_html_join("", "<tr><td>{}</td><td>{}</td></tr>", rows)
