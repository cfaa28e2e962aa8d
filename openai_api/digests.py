"""The digest of each prefix of a client conversation: a SHA-256 chain over its messages, so
a prefix's digest depends on every message before it, in order."""

import hashlib
import json

EMPTY = ""


def chain(previous: str, role: str, text: str) -> str:
    """The digest of a prefix ending in (role, text) after the prefix whose digest is `previous`."""
    step = json.dumps([previous, role, text], ensure_ascii=False)
    return hashlib.sha256(step.encode()).hexdigest()


def prefix_digests(items) -> list[str]:
    """`result[i]` is the digest of the first i messages (`result[0]` is EMPTY)."""
    digests = [EMPTY]
    for role, text in items:
        digests.append(chain(digests[-1], role, text))
    return digests
