"""The review's view of a chat: a token-bounded plain transcript of its recent history.

Every user message carries its author as `[Display name]` (the same bracket prefix the model
sees in shared chats, and in private ones too: the review must name whom a fact is about).
The newest messages win when the budget is spent; older ones are counted, not shown. Tool
results are cut short (their outcome and errors matter, not their full output). Summaries,
markers and the people-only notices are left out: the raw messages are still there.
"""

from dataclasses import dataclass, field

from django.conf import settings

from chats.agent.convert import STORED_FIELDS, StoredMessage, speaker_prefix, transcript_line
from chats.agent.counting import cut_text
from chats.agent.tokens import count_tokens
from chats.models import Chat, Message

TOOL_LINE_TOKENS = 300
# A memory review looks for what people said: tool output is context there, kept to a line,
# so a tool-heavy stretch does not push the people's own words out of the budget.
MEMORY_TOOL_LINE_TOKENS = 40
BATCH = 200


@dataclass
class Snapshot:
    """What the review reads, and how much of the range it covers."""

    text: str
    tokens: int
    shown: int  # messages shown
    omitted: int  # older messages of the range left out for the budget
    tool_calls: int  # among the shown messages
    tool_errors: int
    authors: list[str] = field(default_factory=list)  # of shown user messages, first seen first


def _line(message: StoredMessage, *, line_cap: int, tool_cap: int) -> str:
    if message.role == Message.Role.USER:
        text, _ = cut_text(message.text or "", line_cap)
        return speaker_prefix(message.actor_name) + text
    if message.role == Message.Role.TOOL and message.token_count > tool_cap:
        message.text, _ = cut_text(message.text, tool_cap)
    elif message.token_count > line_cap:
        message.text, _ = cut_text(message.text, line_cap)
    return transcript_line(message, agent_name=settings.AGENT_NAME)


def build_snapshot(
    *,
    chat: Chat,
    after_id: int | None,
    to_id: int | None,
    budget_tokens: int,
    tool_line_tokens: int = TOOL_LINE_TOKENS,
) -> Snapshot:
    """The messages of `chat` after `after_id` up to `to_id` (inclusive) as transcript lines,
    newest kept first, in at most `budget_tokens` tokens (the text never exceeds it); a tool
    result is cut to `tool_line_tokens`."""
    rows = Message.objects.filter(chat=chat).exclude(
        role__in=(Message.Role.SUMMARY, Message.Role.MARKER)
    )
    if after_id is not None:
        rows = rows.filter(id__gt=after_id)
    if to_id is not None:
        rows = rows.filter(id__lte=to_id)
    line_cap = max(50, budget_tokens // 3)
    lines: list[tuple[str, StoredMessage]] = []
    used = 0
    full = False
    for row in rows.order_by("-id").values_list(*STORED_FIELDS).iterator(chunk_size=BATCH):
        message = StoredMessage.from_row(row)
        if message.metadata.get("notice"):
            continue
        line = _line(message, line_cap=line_cap, tool_cap=tool_line_tokens)
        cost = count_tokens(line) + 1  # the newline
        if used + cost > budget_tokens:
            if not lines:  # the newest message alone is too large: cut it to fit
                line, _ = cut_text(line, max(1, budget_tokens - 1))
                lines.append((line, message))
            full = True
            break
        lines.append((line, message))
        used += cost
    lines.reverse()
    text = "\n".join(line for line, _ in lines)
    tokens = count_tokens(text)
    while tokens > budget_tokens and len(lines) > 1:  # tokens merged across a line break
        lines.pop(0)
        text = "\n".join(line for line, _ in lines)
        tokens = count_tokens(text)
        full = True
    omitted = 0
    if full and lines:
        omitted = rows.filter(id__lt=lines[0][1].id).count()
    authors: list[str] = []
    tool_calls = tool_errors = 0
    for _, message in lines:
        if message.role == Message.Role.USER:
            name = speaker_prefix(message.actor_name)[1:-2]
            if name not in authors:
                authors.append(name)
        elif message.role == Message.Role.TOOL:
            tool_calls += 1
            if message.metadata.get("is_error"):
                tool_errors += 1
    return Snapshot(
        text=text,
        tokens=tokens,
        shown=len(lines),
        omitted=omitted,
        tool_calls=tool_calls,
        tool_errors=tool_errors,
        authors=authors,
    )
