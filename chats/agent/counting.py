"""Token accounting and cutting: what one message of a request costs, exactly.

`count_messages_tokens` is the one count used everywhere: the tokens of every content
string, tool-call name, arguments and id, a fixed overhead per message and per tool call,
the JSON of the tool specs, and the priming of the reply. `_Item` is one message of a request
being assembled with that count kept current, so the context builder reaches the same number
without re-encoding history (stored messages cache their token count, and a name prefix or
an interrupted note is accounted for exactly at a token boundary). `cut_text` cuts an
oversized content in the middle, by tokens, with a visible marker.
"""

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from chats.agent.tokens import count_tokens, decode, encode

MESSAGE_OVERHEAD = 4  # role and separators of one message in a chat template
TOOL_CALL_OVERHEAD = 6  # type, framing of name and arguments of one tool call
TOOLS_OVERHEAD = 12  # framing of the tool specs block
REPLY_PRIMING = 3  # the assistant header the reply starts with
CUT_HEAD_SHARE = 0.6  # a cut keeps 60% of what it keeps from the start, 40% from the end

# Shared, never modified: most messages carry no extras.
_NO_EXTRAS: dict = {}

# --- Token accounting --------------------------------------------------------------------

_SHORT_TEXT = 256


@lru_cache(maxsize=32_768)
def _cached_count(text: str) -> int:
    return count_tokens(text)


def _tokens(text: str) -> int:
    """`count_tokens`, remembered for short strings (tool-call ids, names and arguments, short
    messages): encoding has a per-call cost, and the same history is counted every turn."""
    if len(text) <= _SHORT_TEXT:
        return _cached_count(text)
    return count_tokens(text)


@lru_cache(maxsize=256)
def fixed_count(text: str) -> int:
    """`count_tokens` of a text every request of a chat repeats: the tool specs' JSON, the
    base system prompt, headers. Up to 256 of them are remembered (a few MB at most), so a
    turn does not encode them again before every model request."""
    return count_tokens(text)


# --- Image parts --------------------------------------------------------------------------
# The engine reads no image format: whoever builds an image part says what it costs
# (`image_part`), remembered by the URL's hash and length (a data URL can be megabytes; no
# reference to it is kept), so a request counted again later (`enforce_window` between the
# iterations of a tool loop) costs the same. A part nobody told about counts the most an image
# costs at OpenAI's "high" detail, never less than it may cost.
UNKNOWN_IMAGE_TOKENS = 1445
_IMAGE_TOKENS: dict[tuple[int, int], int] = {}
_IMAGE_TOKENS_MAX = 4096


def image_part(url: str, tokens: int) -> dict:
    """The Chat Completions content part of an image at `url`, costing `tokens`."""
    if len(_IMAGE_TOKENS) >= _IMAGE_TOKENS_MAX:
        _IMAGE_TOKENS.clear()
    _IMAGE_TOKENS[(hash(url), len(url))] = tokens
    return {"type": "image_url", "image_url": {"url": url}}


def _part_tokens(part: object) -> int:
    if not isinstance(part, dict):
        return 0
    text = part.get("text")
    if isinstance(text, str):
        return _tokens(text)
    if part.get("type") == "image_url":
        url = str((part.get("image_url") or {}).get("url") or "")
        return _IMAGE_TOKENS.get((hash(url), len(url)), UNKNOWN_IMAGE_TOKENS)
    return 0


def image_parts_tokens(content: object) -> int:
    """Tokens of the image parts of a message content (0 for a string)."""
    if not isinstance(content, list):
        return 0
    return sum(
        _part_tokens(part)
        for part in content
        if isinstance(part, dict) and part.get("type") == "image_url"
    )


def content_tokens(content: object) -> int:
    """Tokens of a message content: a string, or a list of parts (text and images)."""
    if isinstance(content, str):
        return _tokens(content)
    if isinstance(content, list):
        return sum(_part_tokens(part) for part in content)
    return 0


def _extras_tokens(message: dict) -> int:
    tokens = 0
    for call in message.get("tool_calls") or ():
        function = call.get("function") or {}
        tokens += TOOL_CALL_OVERHEAD + _tokens(str(call.get("id", "")))
        tokens += _tokens(str(function.get("name", "")))
        tokens += _tokens(str(function.get("arguments", "")))
    if message.get("tool_call_id"):
        tokens += _tokens(str(message["tool_call_id"]))
    if message.get("name"):
        tokens += _tokens(str(message["name"])) + 1
    return tokens


def message_tokens(message: dict) -> int:
    """Tokens one message costs in a request: overhead, content, tool calls, ids."""
    return MESSAGE_OVERHEAD + content_tokens(message.get("content")) + _extras_tokens(message)


def tools_tokens(tool_specs: Sequence[dict] | None) -> int:
    """Tokens of the `tools` block: its JSON as clients send it (with the spaces of the
    default separators, the larger of the usual forms, so providers that count the spaced
    form are never underestimated) plus a fixed framing."""
    if not tool_specs:
        return 0
    text = json.dumps(list(tool_specs), ensure_ascii=False)
    return TOOLS_OVERHEAD + fixed_count(text)


def count_messages_tokens(
    messages: Sequence[dict], tool_specs: Sequence[dict] | None = None
) -> int:
    """The prompt size of a request: every message, the tool specs and the reply priming."""
    return REPLY_PRIMING + tools_tokens(tool_specs) + sum(message_tokens(m) for m in messages)


# A space preceded by a non-space character is a boundary of the tokenizer's pre-split in
# every string containing those two characters (no pre-split piece holds a non-space
# followed by a space). Text on either side of such a boundary is encoded independently, so
# count(prefix + body) = count(body) + count(prefix + head) − count(head) with head =
# body[:boundary]: exact, while encoding only a word instead of the whole body.
_BOUNDARY = re.compile(r"(?<=\S) ")
_EDGE_SCAN = 256  # characters searched for a boundary near each end of a body
_SHORT_BODY = 48  # shorter bodies are simply encoded whole


# (name prefix or note, first or last word, side) -> tokens the prefix or note adds
_DELTAS: dict[tuple[str, str, bool], int] = {}
_DELTAS_MAX = 20_000


def _delta(extra: str, piece: str, *, before: bool) -> int:
    """Tokens that `extra` adds when joined before (or after) `piece`."""
    joined = extra + piece if before else piece + extra
    if len(joined) > _SHORT_TEXT:  # a system prompt (repeated by every request) or a long word
        return fixed_count(joined) - _tokens(piece)
    key = (extra, piece, before)
    delta = _DELTAS.get(key)
    if delta is None:
        delta = _tokens(joined) - _tokens(piece)
        if len(_DELTAS) >= _DELTAS_MAX:
            _DELTAS.clear()
        _DELTAS[key] = delta
    return delta


def _joined_tokens(prefix: str, body: str, suffix: str, body_tokens: int) -> int:
    """Exactly count_tokens(prefix + body + suffix), from the body's cached count."""
    if not prefix and not suffix:
        return body_tokens
    if len(body) < _SHORT_BODY:
        return _tokens(prefix + body + suffix)
    total = body_tokens
    start = 1
    if prefix:
        match = _BOUNDARY.search(body, 1, _EDGE_SCAN)
        if match is None:
            return count_tokens(prefix + body + suffix)
        start = match.start()
        total += _delta(prefix, body[:start], before=True)
    if suffix:
        end = _last_boundary(body, start)
        if end is None:
            return count_tokens(prefix + body + suffix)
        total += _delta(suffix, body[end:], before=False)
    return total


def _last_boundary(body: str, not_before: int) -> int | None:
    position = len(body)
    floor = max(not_before, len(body) - _EDGE_SCAN)
    while True:
        position = body.rfind(" ", floor, position)
        if position <= 0 or position < floor:
            return None
        if not body[position - 1].isspace():
            return position


# --- Cutting -----------------------------------------------------------------------------


def cut_marker(tokens_cut: int) -> str:
    return f"[… {tokens_cut:,} tokens cut …]"


def _decode_clean(tokens: list[int], *, trim_end: bool) -> tuple[str, int]:
    """Decode, dropping up to 3 tokens at the cut edge that split a multi-byte character."""
    for dropped in range(4):
        if dropped >= len(tokens) and dropped:
            return "", len(tokens)
        piece = tokens[: len(tokens) - dropped] if trim_end else tokens[dropped:]
        text = decode(piece)
        edge = text[-1:] if trim_end else text[:1]
        if edge != "\ufffd":
            return text, len(piece)
    return decode(piece), len(piece)


def cut_text(text: str, max_tokens: int) -> tuple[str, int]:
    """`text` cut by tokens to at most `max_tokens`, keeping its head and tail around a
    visible `[… N tokens cut …]` marker. Returns (text, tokens cut); (text, 0) if it fits."""
    tokens = encode(text)
    if len(tokens) <= max_tokens:
        return text, 0
    marker_tokens = count_tokens("\n" + cut_marker(len(tokens)) + "\n")
    keep = max_tokens - marker_tokens - 2
    while True:
        if keep <= 0:
            marker = cut_marker(len(tokens))
            return (marker if count_tokens(marker) <= max_tokens else ""), len(tokens)
        head_count = int(keep * CUT_HEAD_SHARE)
        head, head_kept = _decode_clean(tokens[:head_count], trim_end=True)
        tail, tail_kept = _decode_clean(tokens[len(tokens) - (keep - head_count) :], trim_end=False)
        removed = len(tokens) - head_kept - tail_kept
        result = f"{head}\n{cut_marker(removed)}\n{tail}"
        size = count_tokens(result)
        if size <= max_tokens:
            return result, removed
        keep -= size - max_tokens + 1


# --- Request items -----------------------------------------------------------------------


@dataclass(slots=True, eq=False)
class _Item:
    """One message of a request being assembled, with its exact token count."""

    role: str
    prefix: str = ""
    body: str = ""
    suffix: str = ""
    extras: dict = field(default_factory=dict)
    body_tokens: int = 0
    tokens: int = 0
    source_id: int | None = None
    cuttable: bool = True
    raw: dict | None = None  # a message with non-text content, passed through unchanged
    original: str | None = None  # the body before it was cut
    parts: tuple = ()  # content parts after the text (what the message carries: files)

    @classmethod
    def from_pieces(
        cls,
        role: str,
        prefix: str,
        body: str,
        suffix: str,
        *,
        body_tokens: int | None = None,
        extras: dict | None = None,
        source_id: int | None = None,
    ) -> "_Item":
        extras = extras or _NO_EXTRAS
        if body_tokens is None or (body_tokens == 0 and body):
            body_tokens = _tokens(body)
        item = cls(role, prefix, body, suffix, extras, body_tokens, 0, source_id)
        item.tokens = MESSAGE_OVERHEAD + _joined_tokens(prefix, body, suffix, body_tokens)
        if extras:
            item.tokens += _extras_tokens(extras)
        return item

    @classmethod
    def from_dict(cls, message: dict) -> "_Item":
        content = message.get("content")
        role = str(message.get("role", ""))
        if not isinstance(content, str):
            return cls(role, tokens=message_tokens(message), cuttable=False, raw=message)
        extras = {key: value for key, value in message.items() if key not in ("role", "content")}
        body_tokens = _tokens(content)
        tokens = MESSAGE_OVERHEAD + body_tokens + _extras_tokens(extras)
        return cls(role, "", content, "", extras, body_tokens, tokens)

    @property
    def was_cut(self) -> bool:
        return self.original is not None

    def message(self) -> dict:
        if self.raw is not None:
            return self.raw
        content = self.prefix + self.body + self.suffix
        if self.parts:
            content = [{"type": "text", "text": content}, *self.parts]
        message = {"role": self.role, "content": content}
        if self.extras:
            message.update(self.extras)
        return message

    def carry(self, parts: Sequence[dict]) -> None:
        """Add content parts after the text (a text part, image parts), counted."""
        parts = tuple(parts)
        if parts:
            self.parts += parts
            self.tokens += sum(_part_tokens(part) for part in parts)

    def cut_body(self, max_body_tokens: int) -> bool:
        """Cut the body to `max_body_tokens` with a marker (from the uncut original)."""
        if not self.cuttable or self.body_tokens <= max_body_tokens:
            return False
        source = self.original if self.original is not None else self.body
        text, removed = cut_text(source, max(max_body_tokens, 0))
        if not removed:
            return False
        self.original = source
        self.body = text
        self.body_tokens = count_tokens(text)
        self.tokens = message_tokens(self.message())
        return True

    def cut_to(self, max_tokens: int) -> bool:
        """Cut the body so that the whole message costs at most `max_tokens`."""
        changed = False
        for _ in range(4):
            if self.tokens <= max_tokens:
                break
            fixed = self.tokens - self.body_tokens
            target = max(max_tokens - fixed, 0)
            if not self.cut_body(min(target, self.body_tokens - 1)):
                break
            changed = True
        return changed
