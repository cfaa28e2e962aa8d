"""Encoded payloads: base64 (standard or URL-safe, padding optional), hex and URL-encoded
runs long enough to hold an instruction are decoded, and when they decode to text that text
is scanned like any other. Hashes, UUIDs and random IDs decode to bytes that are not UTF-8
text (or to nothing worth reading) and are left alone.

Each decoded character keeps the span of the encoded characters it came from, so findings
point into the original text. Work is bounded: at most `MAX_PAYLOADS` runs per text and
`MAX_DECODED` decoded characters in all.
"""

from __future__ import annotations

import base64
import binascii
import re

from hermes_site.scanning.hidden import decode_utf8, looks_like_text

MIN_ENCODED = 16
MAX_PAYLOADS = 32
MAX_DECODED = 64_000

# Wrapped base64 (MIME, PEM: lines of 64 or 76) is one run across its line breaks.
_BASE64 = re.compile(r"[A-Za-z0-9+/_-]{16,}(?:\r?\n[A-Za-z0-9+/_-]{4,})*={0,2}")
_HEX = re.compile(r"(?:[0-9A-Fa-f]{2}){12,}")
_NON_SPACE = re.compile(r"\S*")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")


def encoded_payloads(text: str) -> list[tuple[str, str, list[tuple[int, int]]]]:
    """(how it was encoded, decoded text, source span of each decoded character)."""
    out: list[tuple[str, str, list[tuple[int, int]]]] = []
    if "%" in text:
        for start, token in _percent_tokens(text):
            found = _decode_percent(token, start)
            if found is not None:
                out.append(("URL encoding", *found))
    budget = MAX_DECODED
    # Hex digits are base64 characters too: one pass finds both kinds of run.
    for m in _BASE64.finditer(text):
        if len(out) >= MAX_PAYLOADS or budget <= 0:
            break
        found = None
        if _HEX.fullmatch(m.group()):
            found = _decode_bytes(bytes.fromhex(m.group()), m.start(), m.end(), group=1, chars=2)
            if found is not None:
                out.append(("hex", *found))
        if found is None:
            found = _decode_wrapped(m.group()[: budget * 4 // 3 + 4], m.start())
            if found is not None:
                out.append(("base64", *found))
        if found is not None:
            budget -= len(found[0])
    return out[:MAX_PAYLOADS]


def _percent_tokens(text: str) -> list[tuple[int, str]]:
    """Whitespace-delimited tokens with three or more %XX escapes, found from the escapes
    (a pattern for the whole token would be retried from every position of a long one)."""
    tokens: list[tuple[int, str]] = []
    done_until = -1
    for escape in _ESCAPE.finditer(text):
        if escape.start() < done_until:
            continue
        start = escape.start()
        while start > 0 and not text[start - 1].isspace():
            start -= 1
        done_until = _NON_SPACE.match(text, escape.start()).end()
        token = text[start:done_until]
        if len(_ESCAPE.findall(token)) >= 3:
            tokens.append((start, token))
    return tokens


def _decode_wrapped(run: str, start: int) -> tuple[str, list[tuple[int, int]]] | None:
    """A run that may span lines: decoded whole, or else line by line (two unrelated
    lines of long tokens, one of them base64)."""
    if "\n" not in run:
        return _decode_base64(run, start)
    keep = [i for i, ch in enumerate(run) if ch not in "\r\n"]
    found = _decode_base64("".join(run[i] for i in keep), 0)
    if found is not None:
        decoded, sources = found
        return decoded, [(start + keep[lo], start + keep[hi - 1] + 1) for lo, hi in sources]
    texts: list[str] = []
    spans: list[tuple[int, int]] = []
    for line in re.finditer(r"[^\r\n]+", run):
        found = _decode_base64(line.group(), start + line.start())
        if found is not None:
            texts.append(found[0] + "\n")
            spans.extend([*found[1], found[1][-1]])
    return ("".join(texts), spans) if texts else None


def _decode_base64(run: str, start: int) -> tuple[str, list[tuple[int, int]]] | None:
    body = run.rstrip("=")
    if ("-" in body or "_" in body) and ("+" in body or "/" in body):
        return None  # two alphabets at once: a path or a slug, not base64
    body = body[: len(body) - len(body) % 4] if len(body) % 4 == 1 else body
    padded = body + "=" * (-len(body) % 4)
    try:
        if "-" in body or "_" in body:
            data = base64.urlsafe_b64decode(padded)
        else:
            data = base64.b64decode(padded, validate=True)
    except (binascii.Error, ValueError):
        return None
    return _decode_bytes(data, start, start + len(run), group=3, chars=4)


def _decode_bytes(
    data: bytes, start: int, end: int, *, group: int, chars: int
) -> tuple[str, list[tuple[int, int]]] | None:
    """UTF-8 text of `data` if it reads as text; every `group` bytes came from `chars`
    encoded characters (3 bytes per 4 in base64, 1 per 2 in hex)."""
    if len(data) < 8:
        return None
    decoded, spans = decode_utf8(data)
    if not looks_like_text(decoded):
        return None
    sources = []
    for lo, hi in spans:
        first = start + (lo // group) * chars
        last = start + ((hi + group - 1) // group) * chars
        sources.append((min(first, end - 1), min(last, end)))
    return decoded, sources


def _decode_percent(token: str, start: int) -> tuple[str, list[tuple[int, int]]] | None:
    data = bytearray()
    byte_sources: list[tuple[int, int]] = []
    pos = 0
    while pos < len(token):
        m = _ESCAPE.match(token, pos)
        if m:
            data.append(int(m.group(1), 16))
            byte_sources.append((start + pos, start + pos + 3))
            pos += 3
            continue
        raw = token[pos].encode("utf-8")
        data.extend(raw)
        byte_sources.extend([(start + pos, start + pos + 1)] * len(raw))
        pos += 1
    decoded, spans = decode_utf8(bytes(data))
    if not looks_like_text(decoded):
        return None
    return decoded, [(byte_sources[lo][0], byte_sources[hi - 1][1]) for lo, hi in spans]
