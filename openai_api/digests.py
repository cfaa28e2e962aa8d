"""The digest of each prefix of a client conversation: a SHA-256 chain over its messages, so
a prefix's digest depends on every message before it, in order."""

import hashlib
import json

EMPTY = ""


def chain(previous: str, role: str, text: str) -> str:
    """The digest of a prefix ending in (role, text) after the prefix whose digest is `previous`."""
    step = json.dumps([previous, role, text], ensure_ascii=False)
    return hashlib.sha256(step.encode()).hexdigest()


def parts_fingerprint(bodies: list[dict]) -> str:
    """What a message's images and files add to its digest ("" for none): two messages with
    the same words and different images are different messages."""
    if not bodies:
        return ""
    canonical = json.dumps(bodies, ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(canonical.encode()).hexdigest()


def prefix_digests(items, fingerprints=()) -> list[str]:
    """`result[i]` is the digest of the first i messages (`result[0]` is EMPTY); a message
    with a `fingerprints[i]` (its parts') chains it after its text, one without chains as
    before parts existed."""
    digests = [EMPTY]
    for index, (role, text) in enumerate(items):
        fingerprint = fingerprints[index] if index < len(fingerprints) else ""
        if fingerprint:
            text = f"{text}\x00parts:{fingerprint}"
        digests.append(chain(digests[-1], role, text))
    return digests
