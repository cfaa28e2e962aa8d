"""Hidden code points made visible, for pages where people approve text."""

from __future__ import annotations

from hermes_site.scanning.hidden import hidden_runs, quote, selector_text, tag_text


def reveal_hidden(text: str) -> str:
    """`text` with every hidden character the scanner would report shown as a marker:
    `⟦U+200B⟧` for one code point, `⟦tags: "…"⟧` for tag characters (decoded to the ASCII
    they spell) and `⟦selectors: "…"⟧` for variation selectors that spell text. Legitimate
    uses (ZWJ in emoji, ZWNJ in Persian, VS16 on an emoji, the England/Scotland/Wales flags)
    are left as they are, so what a reviewer sees is what the model will read."""
    out: list[str] = []
    pos = 0
    for run in hidden_runs(text):
        if run.kind is None:
            continue
        out.append(text[pos : run.start])
        out.append(_marker(text, run.kind, run.start, run.end))
        pos = run.end
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _marker(text: str, kind: str, start: int, end: int) -> str:
    chunk = text[start:end]
    if kind == "selector" and end - start > 1:
        decoded = selector_text(chunk)
        if decoded is not None:
            return f'⟦selectors: "{quote(decoded)}"⟧'
    if kind != "tag":
        return "".join(_one(c) for c in chunk)
    parts: list[str] = []
    i = 0
    while i < len(chunk):
        j = i
        while j < len(chunk) and 0xE0020 <= ord(chunk[j]) <= 0xE007E:
            j += 1
        if j > i:
            parts.append(f'⟦tags: "{quote(tag_text(chunk[i:j]))}"⟧')
            i = j
        else:
            parts.append(_one(chunk[i]))
            i += 1
    return "".join(parts)


def _one(ch: str) -> str:
    return f"⟦U+{ord(ch):04X}⟧"
