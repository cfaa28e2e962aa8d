"""The context builder: what one model request contains, counted in tokens (seed 003).

A request is one system message (identity, channel hints, the multi-user note, the date, the
registered prompt sections, and the summary of older turns), the history newest-first
until its budget is spent, and the trigger message last. Every part has a share of the
window; an oversized single message is cut in the middle with a visible marker, by tokens;
`enforce_window` makes it impossible for a request to exceed the input limit. The turn
loop calls it again before every follow-up request inside a turn. Nothing assembled here is
ever stored.

Token accounting (`count_messages_tokens`, in `chats.agent.counting`) is the one used
everywhere; reading history (`chats.agent.history`) reuses each stored message's cached count,
so the builder reaches the same number without re-encoding history.
"""

import gc
import logging
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace

from django.conf import settings
from django.utils import timezone

from chats.agent.carrying import carry_parts, is_tool_files
from chats.agent.convert import (
    SUMMARY_HEADER,
    StoredMessage,
    content_pieces,
    openai_role,
)
from chats.agent.counting import (
    MESSAGE_OVERHEAD,
    REPLY_PRIMING,
    _Item,
    cut_text,
    fixed_count,
    tools_tokens,
)
from chats.agent.history import (
    HistoryBounds,
    _Grouper,
    _HistoryScan,
    _row_item,
    _text_tokens,
    _Unit,
    _unit_items,
    history_bounds,
    unit_rows,
)
from chats.agent.registry import PromptSectionProvider, TurnContext, registry
from chats.agent.tokens import count_tokens
from chats.models import Chat, Message

logger = logging.getLogger(__name__)


CUT_FLOOR = 48  # the guard never cuts a content below this many tokens
HISTORY_CUT_FLOOR = 32  # nor the minimum history below this
SECTION_MIN_TOKENS = 24  # a prompt section squeezed below this is left out instead

IDENTITY = (
    "You are {name}, a helpful AI agent working with a team. Be accurate and concise, say "
    "when you are unsure, and use the tools you are given when they help."
)
CHANNEL_HINTS = {
    "web": "You are talking in the web dashboard: Markdown (lists, tables, code blocks) is "
    "rendered.",
    "telegram": "You are talking on Telegram: keep messages short; use only simple Markdown "
    "(bold, italic, inline code, code blocks, links), no tables or headings.",
    "cli": "You are talking in a terminal: write plain text without Markdown, short lines.",
    "api": "You are answering through an API: write plain text unless asked for a format.",
    "openai": "You are answering one person through their own chat client or editor "
    "(an OpenAI-compatible app): Markdown is usually rendered.",
}
MULTI_USER_NOTE = (
    "Several people talk in this chat. Each user message starts with its author's name in "
    "brackets, like [Alice]. Address people by name and keep track of who said what; do not "
    "start your own replies with a bracketed name."
)


class ContextWindowExceeded(Exception):
    """Even the system prompt, the trigger message and the tool specs cannot fit the window."""


# --- Budget ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ContextBudget:
    """Token shares of one model's window (seed 003), from the CONTEXT_SHARE_* settings."""

    window: int
    reply_reserve: int
    input_limit: int
    system: int
    history: int
    current: int

    @classmethod
    def from_settings(cls, window_tokens: int) -> "ContextBudget":
        """Reply reserve = CONTEXT_SHARE_REPLY × window; input_limit = window − reserve; the
        system, history and current shares are scaled down if together they exceed it."""
        window = max(int(window_tokens), 1)
        reserve = min(int(window * settings.CONTEXT_SHARE_REPLY), window - 1)
        input_limit = window - reserve
        shares = [
            int(window * settings.CONTEXT_SHARE_SYSTEM),
            int(window * settings.CONTEXT_SHARE_HISTORY),
            int(window * settings.CONTEXT_SHARE_CURRENT),
        ]
        if sum(shares) > input_limit:
            scale = input_limit / sum(shares)
            shares = [int(share * scale) for share in shares]
        system, history, current = shares
        return cls(window, reserve, input_limit, system, history, current)

    def as_dict(self) -> dict:
        return {
            "window": self.window,
            "reply_reserve": self.reply_reserve,
            "input_limit": self.input_limit,
            "system": self.system,
            "history": self.history,
            "current": self.current,
        }


def _units(items: Sequence[_Item], start: int, end: int) -> list[list[int]]:
    """Indexes of items[start:end] grouped: a tool-calling assistant message and the tool
    results right after it are one unit; every other message is a unit of its own."""
    units: list[list[int]] = []
    index = start
    while index < end:
        item = items[index]
        unit = [index]
        calls = item.extras.get("tool_calls") if item.raw is None else item.raw.get("tool_calls")
        if item.role == "assistant" and calls:
            ids = {str(call.get("id")) for call in calls}
            while index + 1 < end:
                follower = items[index + 1]
                source = follower.raw if follower.raw is not None else follower.extras
                if follower.role != "tool" or str(source.get("tool_call_id")) not in ids:
                    break
                index += 1
                unit.append(index)
            if index + 1 < end and _tool_files(items[index + 1]):
                index += 1  # the step's tool files go (and stay) with it
                unit.append(index)
        units.append(unit)
        index += 1
    return units


def _tool_files(item: _Item) -> bool:
    """A step's tool files (a labelled user message), not a person's message."""
    return item.raw is not None and item.role == "user" and is_tool_files(item.raw)


def _enforce(
    items: list[_Item], fixed_tokens: int, limit: int, min_history: int
) -> tuple[list[_Item], int, int]:
    total = REPLY_PRIMING + fixed_tokens + sum(item.tokens for item in items)
    if total <= limit:
        return items, 0, 0
    head = 1 if items and items[0].role == "system" else 0
    last_user = max(
        (
            index
            for index in range(head, len(items))
            if items[index].role == "user" and not _tool_files(items[index])
        ),
        default=None,
    )
    tail = last_user if last_user is not None else max(head, len(items) - 1)
    units = _units(items, head, tail)
    alive = [True] * len(items)
    dropped = cut = 0

    def drop(unit: list[int]) -> int:
        nonlocal dropped
        freed = 0
        for index in unit:
            if alive[index]:
                alive[index] = False
                freed += items[index].tokens
                dropped += 1
        return freed

    newest_kept = 0
    protected_from = len(units)
    while protected_from > 0 and newest_kept < min_history:
        protected_from -= 1
        newest_kept += len(units[protected_from])
    # 1. the oldest history beyond the minimum goes first, a whole group at a time
    for unit in units[:protected_from]:
        if total <= limit:
            break
        total -= drop(unit)
    # 2. then the largest remaining contents are cut (history, system prompt, trigger, tools)
    while total > limit:
        candidates = [
            index
            for index, item in enumerate(items)
            if alive[index] and item.cuttable and item.body_tokens > CUT_FLOOR
        ]
        if not candidates:
            break
        item = items[max(candidates, key=lambda index: items[index].body_tokens)]
        before = item.tokens
        target = max(CUT_FLOOR, item.body_tokens - (total - limit) - 8)
        if item.cut_body(target):
            cut += 1
            total += item.tokens - before
        else:
            item.cuttable = False
    # 3. then even the minimum history goes
    for unit in units:
        if total <= limit:
            break
        total -= drop(unit)
    if total > limit:
        raise ContextWindowExceeded(
            f"The request needs {total:,} tokens but the model accepts at most {limit:,}, even "
            f"after dropping all history and cutting long messages (tool specs: "
            f"{fixed_tokens:,} tokens). Use a model with a larger context window or fewer tools."
        )
    return [item for index, item in enumerate(items) if alive[index]], dropped, cut


def enforce_window(
    messages: Sequence[dict],
    tool_specs: Sequence[dict] | None,
    limit: int,
    *,
    min_history: int | None = None,
) -> list[dict]:
    """Return the messages of a request that costs at most `limit` tokens
    (`count_messages_tokens(result, tool_specs) <= limit`).

    The leading system message and everything from the last user message on (the trigger
    and the current turn's tool calls and results) are kept; if the request is too large,
    the oldest history goes first (a tool call always with its results), keeping the newest
    `min_history` messages (default CONTEXT_MIN_HISTORY_MESSAGES); then the largest
    contents are cut with a visible marker; then the rest of the history goes. Raises
    ContextWindowExceeded only if even that cannot fit. The input is not modified."""
    if min_history is None:
        min_history = settings.CONTEXT_MIN_HISTORY_MESSAGES
    items = [_Item.from_dict(message) for message in messages]
    kept, _, _ = _enforce(items, tools_tokens(tool_specs), limit, min_history)
    return [item.message() for item in kept]


# --- System prompt -----------------------------------------------------------------------


def _water_level(sizes: Sequence[int], available: int) -> int:
    """The largest cap c with sum(min(size, c)) <= available."""
    if sum(sizes) <= available:
        return max(sizes, default=0)
    if available <= 0:
        return 0
    ordered = sorted(sizes)
    remaining = available
    for rank, size in enumerate(ordered):
        share = remaining // (len(ordered) - rank)
        if size > share:
            return share
        remaining -= size
    return ordered[-1]


def base_system_prompt(chat: Chat) -> str:
    """Identity, channel hints, the multi-user note of shared chats and today's UTC date."""
    parts = [IDENTITY.format(name=settings.AGENT_NAME)]
    if chat.channel in CHANNEL_HINTS:
        parts.append(CHANNEL_HINTS[chat.channel])
    if chat.is_shared:
        parts.append(MULTI_USER_NOTE)
    parts.append(f"Today's date is {timezone.now():%Y-%m-%d} (UTC).")
    return "\n".join(parts)


def _render_sections(
    sections: Sequence[PromptSectionProvider], turn_context: TurnContext, available: int
) -> tuple[list[str], list[dict]]:
    rendered: list[tuple[str, str]] = []
    reports: list[dict] = []
    for section in sections:
        name = str(getattr(section, "name", type(section).__name__))
        try:
            text = section.render(turn_context)
            if not isinstance(text, str):
                raise TypeError(f"render() returned {type(text).__name__}, not str")
        except Exception as exc:
            logger.warning("prompt section %r failed and is left out: %s", name, exc, exc_info=True)
            error = repr(exc)[:300]
            reports.append({"name": name, "status": "failed", "tokens": 0, "error": error})
            continue
        details = getattr(text, "details", None)
        text = text.strip()
        if not text:
            reports.append({"name": name, "status": "empty", "tokens": 0})
            continue
        rendered.append((name, text))
        report = {"name": name, "status": "included", "tokens": count_tokens(text)}
        if isinstance(details, dict) and details:
            report["details"] = details
        reports.append(report)
    texts: list[str] = []
    measured = [report for report in reports if report["status"] == "included"]
    level = _water_level([report["tokens"] + 2 for report in measured], available) - 2
    for (_name, text), report in zip(rendered, measured, strict=True):
        if report["tokens"] <= level:
            texts.append(text)
        elif level < SECTION_MIN_TOKENS:
            report.update(status="omitted", original_tokens=report["tokens"], tokens=0)
        else:
            cut, _ = cut_text(text, level)
            report.update(status="cut", original_tokens=report["tokens"], tokens=count_tokens(cut))
            texts.append(cut)
    return texts, reports


# --- The builder -------------------------------------------------------------------------


@dataclass
class BuiltContext:
    """A request ready to send: OpenAI messages, their token count, the reply limit, and a
    JSON-serialisable report of what went in, what was cut and what was left out."""

    messages: list[dict]
    prompt_tokens: int
    max_reply_tokens: int
    report: dict
    budget: ContextBudget
    tool_specs: list[dict]


def _system_item(
    chat: Chat,
    sections: Sequence[PromptSectionProvider],
    turn_context: TurnContext,
    budget: ContextBudget,
    summary: StoredMessage | None,
) -> tuple[_Item, list[dict], dict | None]:
    """The one system message: the base prompt (short, never cut here), the sections in the
    rest of the system share, then the summary (at most half the history share)."""
    base = base_system_prompt(chat)
    available = budget.system - fixed_count(base) - 2
    section_texts, section_reports = _render_sections(sections, turn_context, available)
    prefix = "\n\n".join([base, *section_texts])
    body, body_tokens, summary_report = "", 0, None
    if summary is not None:
        body, body_tokens = summary.text, summary.token_count or count_tokens(summary.text)
        status = "included"
        if body_tokens > budget.history // 2:
            body, _ = cut_text(body, budget.history // 2)
            body_tokens, status = count_tokens(body), "cut"
        prefix = f"{prefix}\n\n{SUMMARY_HEADER}"
        summary_report = {
            "id": summary.id,
            "covers_from_id": summary.metadata["covers_from_id"],
            "covers_to_id": summary.metadata["covers_to_id"],
            "messages": summary.metadata.get("messages"),
            "status": status,
            "tokens": body_tokens + fixed_count(SUMMARY_HEADER),
        }
    item = _Item.from_pieces("system", prefix, body, "", body_tokens=body_tokens)
    # The guard cuts the system message as one text.
    item.prefix, item.body, item.body_tokens = "", prefix + body, item.tokens - MESSAGE_OVERHEAD
    return item, section_reports, summary_report


def _trigger_item(trigger: Message, turn_context: TurnContext, *, shared: bool) -> _Item:
    if turn_context.actor is not None and turn_context.actor.pk == trigger.actor_id:
        trigger.actor = turn_context.actor  # spares a query
    stored = StoredMessage.from_message(trigger)
    prefix, body, suffix = content_pieces(stored, shared=shared)
    return _Item.from_pieces(
        openai_role(stored),
        prefix,
        body,
        suffix,
        body_tokens=_text_tokens(stored, body),
        source_id=trigger.pk,
    )


def _dropped(row: StoredMessage) -> list:
    return [row.id, row.role, row.token_count + MESSAGE_OVERHEAD, "dropped"]


@dataclass
class _Selection:
    accepted: list[tuple[_Unit | StoredMessage, list[_Item]]]  # newest first
    statuses: dict[int, list]  # id -> [id, role, tokens, status] of the rows read
    stopped: bool  # the budget was spent before the history was


def _select_history(
    scan: _HistoryScan,
    budget_tokens: int,
    *,
    single_cap: int,
    min_history: int,
    shared: bool,
    supports_tools: bool,
) -> _Selection:
    """Units newest first while they fit `budget_tokens`, a tool group whole or not at all,
    each message cut to `single_cap`; the newest `min_history` messages are kept even when
    they do not fit, cut to fit together (dropped only when even that cannot fit)."""
    selection = _Selection([], {}, False)
    accepted, statuses = selection.accepted, selection.statuses
    used = kept_messages = seen_rows = 0
    grouper = _Grouper(iter(scan))
    for unit in grouper:
        if type(unit) is StoredMessage:  # the common case: a message that is a unit alone
            item = _row_item(unit, shared=shared)
            if item.body_tokens > single_cap:
                item.cut_body(single_cap)
            items, cost, count = [item], item.tokens, 1
        else:
            count = len(unit.rows)
            if unit.orphan:
                seen_rows += count
                statuses[unit.anchor] = _dropped(unit.rows[0])
                continue
            items = _unit_items(unit, shared=shared, supports_tools=supports_tools)
            cost = 0
            for item in items:
                if item.body_tokens > single_cap:
                    item.cut_body(single_cap)
                cost += item.tokens
        seen_rows += count
        if used + cost > budget_tokens and kept_messages >= min_history:
            statuses.update((row.id, _dropped(row)) for row in unit_rows(unit))
            selection.stopped = True
            break
        accepted.append((unit, items))
        used += cost
        kept_messages += count
        if len(accepted) % 16 == 1:  # how many more rows the budget can use, roughly
            average = max(used / seen_rows, 1)
            scan.wanted = int((budget_tokens - used) / average * 1.05) + 16
        if kept_messages >= min_history and used >= budget_tokens - MESSAGE_OVERHEAD:
            selection.stopped = True
            break
    for row in grouper.pending.values():  # results whose call lies beyond the stop
        statuses[row.id] = _dropped(row)

    if used > budget_tokens:  # the minimum history: cut the largest, then drop the oldest
        items = [item for _, unit_items in accepted for item in unit_items]
        fixed = sum(item.tokens - item.body_tokens for item in items)
        level = _water_level([item.body_tokens for item in items], budget_tokens - fixed)
        for item in items:
            item.cut_body(max(level, HISTORY_CUT_FLOOR))
        used = sum(item.tokens for item in items)
        while used > budget_tokens and accepted:
            unit, unit_items = accepted.pop()
            used -= sum(item.tokens for item in unit_items)
            statuses.update((row.id, _dropped(row)) for row in unit_rows(unit))
            selection.stopped = True
    return selection


def _record_statuses(
    selection: _Selection, alive: set[int] | None, *, supports_tools: bool
) -> None:
    """The status of every accepted row once the guard has run: included, cut or dropped
    (`alive`: the ids of the items the guard kept; None: it kept them all)."""
    statuses = selection.statuses
    for unit, unit_items in selection.accepted:
        if type(unit) is StoredMessage or (len(unit_items) == 1 and len(unit.rows) == 1):
            row = unit if type(unit) is StoredMessage else unit.rows[0]  # one message
            item = unit_items[0]
            if alive is None or id(item) in alive:
                status = "cut" if item.original is not None else "included"
                statuses[row.id] = [row.id, row.role, item.tokens, status]
            else:
                statuses[row.id] = _dropped(row)
            continue
        by_source = {item.source_id: item for item in unit_items}
        flattened = unit.call is not None and not supports_tools
        for row in unit.rows:
            item = by_source.get(unit.call.id if flattened else row.id)
            if item is None or (alive is not None and id(item) not in alive):
                statuses[row.id] = _dropped(row)
            else:
                tokens = item.tokens if not flattened or row is unit.call else 0
                statuses[row.id] = [row.id, row.role, tokens, "cut" if item.was_cut else "included"]


@contextmanager
def _collector_paused():
    """No cyclic garbage collection while a request is assembled: it allocates a few
    thousand short-lived objects (rows, items, report rows), every ~700 of which would start
    a collection that walks them all while they are still in use, and they form no cycles
    (reference counting frees them when the build returns). Restores the previous state;
    another thread's collections only wait those few milliseconds."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def build_context(
    *,
    chat: Chat,
    trigger: Message,
    provider_info,
    tool_specs: Sequence[dict] | None,
    turn_context: TurnContext,
    sections: Sequence[PromptSectionProvider] | None = None,
) -> BuiltContext:
    """Assemble the request answering `trigger`, never larger than the input limit.

    System prompt (sections cut to its share; a failing section is left out and reported),
    the summary of older turns, history newest first until its budget is spent (tool calls
    with their results, at least CONTEXT_MIN_HISTORY_MESSAGES messages), the trigger cut to
    its share. Unused shares flow to the history. Raises ContextWindowExceeded only if even
    the system prompt, trigger and tool specs cannot fit."""
    with _collector_paused():
        return _build_context(
            chat=chat,
            trigger=trigger,
            provider_info=provider_info,
            tool_specs=tool_specs,
            turn_context=turn_context,
            sections=sections,
        )


def _build_context(
    *,
    chat: Chat,
    trigger: Message,
    provider_info,
    tool_specs: Sequence[dict] | None,
    turn_context: TurnContext,
    sections: Sequence[PromptSectionProvider] | None,
) -> BuiltContext:
    budget = ContextBudget.from_settings(provider_info.context_tokens)
    supports_tools = bool(getattr(provider_info, "supports_tools", True))
    tool_specs = list(tool_specs or [])
    tool_tokens = tools_tokens(tool_specs)
    shared = chat.is_shared
    min_history = settings.CONTEXT_MIN_HISTORY_MESSAGES
    if sections is None:
        sections = registry.sections()

    # An app may narrow this turn's history (an isolated scheduled run): then no summary
    # and no reset marker of the chat applies, only the messages it names.
    scope = registry.history_scope_for(turn_context)
    if scope is None:
        bounds = history_bounds(chat, before_id=trigger.pk)
    else:
        bounds = HistoryBounds(marker_id=None, end_id=None, summary=None, start_id=0)
    # Sections learn where the history starts, e.g. to keep their text stable until the
    # context is compressed or reset.
    section_context = replace(turn_context, history_start_id=bounds.start_id)
    system_item, section_reports, summary_report = _system_item(
        chat, sections, section_context, budget, bounds.summary
    )
    trigger_item = _trigger_item(trigger, turn_context, shared=shared)
    trigger_original = trigger_item.tokens
    trigger_item.cut_to(budget.current)

    # History gets what is left: its share plus what system and trigger did not use.
    history_budget = (
        budget.input_limit - REPLY_PRIMING - tool_tokens - system_item.tokens - trigger_item.tokens
    )
    scan = _HistoryScan(
        chat,
        start_id=bounds.start_id,
        trigger_id=trigger.pk,
        end_id=bounds.end_id,
        turn=turn_context.turn,
        only_ids=scope.message_ids if scope is not None else None,
    )
    try:
        selection = _select_history(
            scan,
            history_budget,
            single_cap=max(budget.current, HISTORY_CUT_FLOOR),
            min_history=min_history,
            shared=shared,
            supports_tools=supports_tools,
        )
    finally:
        scan.done()
    selection.accepted.reverse()  # the units came newest first (by where they start)
    # What messages carry besides their text (files), asked once for the whole window; the
    # trigger's may take two thirds of what the history had, an older message's a quarter.
    carried = carry_parts(
        trigger=trigger,
        trigger_item=trigger_item,
        trigger_cap=max(history_budget, 0) * 2 // 3,
        history=selection.accepted,
        history_cap=max(budget.current, max(history_budget, 0) // 4),
        provider_info=provider_info,
        turn_context=turn_context,
    )
    history_items = [item for _, items in selection.accepted for item in items]
    items = [system_item, *history_items, trigger_item]
    kept, guard_dropped, guard_cut = _enforce(items, tool_tokens, budget.input_limit, min_history)
    # Nearly always the guard keeps every item (the shares already fit the window).
    alive = None if guard_dropped == 0 else {id(item) for item in kept}
    _record_statuses(selection, alive, supports_tools=supports_tools)

    statuses = selection.statuses
    older = None  # what the scan never read: everything between the start and the oldest row
    if selection.stopped and not scan.exhausted and statuses and scope is None:
        oldest = min(statuses)
        if oldest > bounds.start_id + 1:
            older = {"after_id": bounds.start_id, "before_id": oldest, "status": "dropped"}
    prompt_tokens = REPLY_PRIMING + tool_tokens + sum(item.tokens for item in kept)
    summary_tokens = summary_report["tokens"] if summary_report else 0
    report = {
        "budget": {**budget.as_dict(), "history_available": history_budget},
        "tokens": {
            "system": system_item.tokens - summary_tokens,
            "sections": {section["name"]: section["tokens"] for section in section_reports},
            "summary": summary_tokens,
            "history": sum(
                item.tokens for item in history_items if alive is None or id(item) in alive
            ),
            "current": trigger_item.tokens,
            "tools": tool_tokens,
            "total": prompt_tokens,
        },
        "sections": section_reports,
        "reset_marker_id": bounds.marker_id,
        "history_scope": scope.reason if scope is not None else None,
        "start_id": bounds.start_id,
        "summary": summary_report,
        "trigger": {
            "id": trigger.pk,
            "tokens": trigger_item.tokens,
            "original_tokens": trigger_original,
            "status": "cut" if trigger_item.was_cut else "included",
        },
        "history_columns": ["id", "role", "tokens", "status"],
        "history": [statuses[key] for key in sorted(statuses)],
        "older_dropped": older,
        "guard": {"dropped_messages": guard_dropped, "cut_messages": guard_cut},
    }
    if carried:
        report["carried"] = carried
    return BuiltContext(
        messages=[item.message() for item in kept],
        prompt_tokens=prompt_tokens,
        max_reply_tokens=budget.reply_reserve,
        report=report,
        budget=budget,
        tool_specs=tool_specs,
    )


def explain_message(report: dict, message_id: int) -> dict:
    """What a prompt report says about one message: why the model did or did not see it."""
    for row in report.get("history", ()):
        if row[0] == message_id:
            return dict(zip(report["history_columns"], row, strict=True))
    trigger = report.get("trigger") or {}
    if message_id == trigger.get("id"):
        return {"id": message_id, "role": "trigger", "status": trigger["status"]}
    summary = report.get("summary")
    if summary and summary["covers_from_id"] <= message_id <= summary["covers_to_id"]:
        return {"id": message_id, "status": "summarised", "summary_id": summary["id"]}
    marker = report.get("reset_marker_id")
    if marker is not None and message_id < marker:
        return {"id": message_id, "status": "before_reset", "reset_marker_id": marker}
    if report.get("history_scope"):  # a narrowed history: the rest was never offered
        return {"id": message_id, "status": "outside_history_scope"}
    older = report.get("older_dropped")
    if older and older["after_id"] < message_id < older["before_id"]:
        return {"id": message_id, "status": "dropped"}
    if message_id <= report.get("start_id", 0):
        return {"id": message_id, "status": "before_history_start"}
    return {"id": message_id, "status": "not_in_history"}
