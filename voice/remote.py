"""The optional remote engine: any OpenAI-compatible `/audio/transcriptions` server
(STT_BASE_URL, STT_MODEL, STT_API_KEY), sent the parts the child wrote as WAV files, one
request each. Any failure raises RemoteFailed: the caller falls back to the local engine."""

import logging
from collections import Counter
from pathlib import Path

import httpx
from django.conf import settings

logger = logging.getLogger(__name__)

# OpenAI's verbose_json names languages in English ("chinese"); the hub stores codes.
_LANGUAGE_NAMES = {
    "english": "en", "chinese": "zh", "mandarin": "zh", "german": "de", "french": "fr",
    "spanish": "es", "japanese": "ja", "russian": "ru", "italian": "it", "portuguese": "pt",
}  # fmt: skip


class RemoteFailed(Exception):
    pass


def engine_name() -> str:
    return f"api:{settings.STT_MODEL}"[:64]


def _language(value) -> str:
    text = str(value or "").strip().lower()
    return _LANGUAGE_NAMES.get(text, text)[:16]


def transcribe_parts(files: list[str | None], *, on_part=None) -> dict:
    """{"text", "language", "languages"} of the parts (None: a silent part, skipped)."""
    url = settings.STT_BASE_URL.rstrip("/") + "/audio/transcriptions"
    headers = {"Authorization": f"Bearer {settings.STT_API_KEY}"} if settings.STT_API_KEY else {}
    texts, heard = [], Counter()
    with httpx.Client(timeout=settings.STT_TIMEOUT_SECONDS, follow_redirects=False) as client:
        for index, path in enumerate(files, start=1):
            if path is not None:
                data = {"model": settings.STT_MODEL, "response_format": "verbose_json"}
                if settings.VOICE_LANGUAGE:
                    data["language"] = settings.VOICE_LANGUAGE
                try:
                    response = client.post(
                        url,
                        headers=headers,
                        data=data,
                        files={"file": (Path(path).name, Path(path).read_bytes(), "audio/wav")},
                    )
                    response.raise_for_status()
                    body = response.json()
                except (httpx.HTTPError, ValueError) as exc:
                    raise RemoteFailed(f"{type(exc).__name__}: {exc}") from exc
                if not isinstance(body, dict) or not isinstance(body.get("text"), str):
                    raise RemoteFailed("the answer has no text")
                text = body["text"].strip()
                if text:
                    texts.append(text)
                    heard[_language(body.get("language")) or settings.VOICE_LANGUAGE] += 1
            if on_part is not None:
                on_part(index, len(files))
    top = heard.most_common(1)[0][0] if heard else settings.VOICE_LANGUAGE
    joiner = "" if top in ("zh", "ja") else " "
    return {
        "text": joiner.join(texts),
        "language": top or "",
        "languages": [code for code, _ in heard.most_common() if code],
    }
