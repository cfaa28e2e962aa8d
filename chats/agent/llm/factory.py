"""Which model the engine talks to, chosen once per process from `LLM_PROVIDER`.

"auto": an OpenAI-compatible server when LLM_BASE_URL is set, else the small local demo
model when the `local` extra is installed, else `NoModelProvider`, whose turns fail with
instructions for configuring a model. "openai", "local" and "none" force one.
"""

import importlib
import logging
import threading
from collections.abc import Callable, Iterator

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from chats.agent.llm.base import (
    ChatProvider,
    LLMNotConfigured,
    ProviderInfo,
    StreamEvent,
    openai_compat_info,
)

logger = logging.getLogger(__name__)

PROVIDER_CHOICES = ("auto", "openai", "local", "none")
LOCAL_MODULE = "chats.agent.llm.local"

HOW_TO_CONFIGURE = (
    "No language model is configured. Set LLM_BASE_URL (e.g. http://127.0.0.1:11434/v1 for "
    "Ollama or https://api.openai.com/v1), LLM_API_KEY and LLM_MODEL in .env and restart, or "
    "run `make run`, which installs the small offline demo model (the `local` extra)."
)

_lock = threading.Lock()
_cached: ChatProvider | None = None


class NoModelProvider:
    """Stands in when no model is configured: every request fails with instructions."""

    def __init__(self, *, reason: str = ""):
        self.reason = reason
        self.info = ProviderInfo(
            name="none",
            model="",
            context_tokens=settings.LLM_CONTEXT_TOKENS,
            supports_tools=False,
            notice=reason or "No language model is configured, so the agent cannot answer yet.",
        )

    def stream(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        max_tokens: int | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> Iterator[StreamEvent]:
        message = f"{self.reason} {HOW_TO_CONFIGURE}" if self.reason else HOW_TO_CONFIGURE
        raise LLMNotConfigured(message, user_message=message)
        yield  # a generator, like every provider's stream

    def complete(self, messages: list[dict], *, max_tokens: int | None = None, **_) -> str:
        for _event in self.stream(messages, max_tokens=max_tokens):
            pass
        return ""


def get_provider() -> ChatProvider:
    """The provider of this process (built on first use, then cached)."""
    global _cached
    with _lock:
        if _cached is None:
            _cached = build_provider()
            logger.info("LLM provider: %s (%s)", _cached.info.name, _cached.info.model)
        return _cached


def provider_info() -> ProviderInfo:
    """What the model is, for pages: the provider's own answer once built; before that, for
    an OpenAI-compatible server, the same answer from the settings, so a web process that
    only shows pages never imports the SDK (about 40 MiB) nor builds a client."""
    with _lock:
        cached = _cached
    if cached is not None:
        return cached.info
    choice = (settings.LLM_PROVIDER or "auto").strip().lower()
    if choice == "openai" or (choice == "auto" and settings.LLM_BASE_URL):
        from chats.agent.llm.vision import model_takes_images

        return openai_compat_info(
            model=settings.LLM_MODEL,
            context_tokens=settings.LLM_CONTEXT_TOKENS,
            base_url=settings.LLM_BASE_URL,
            supports_images=model_takes_images(settings.LLM_MODEL, settings.LLM_VISION),
        )
    return get_provider().info


def reset_provider_cache() -> None:
    """Forget the cached provider: the next `get_provider()` reads the settings again."""
    global _cached
    with _lock:
        previous, _cached = _cached, None
    close = getattr(previous, "close", None)
    if callable(close):
        try:
            close()
        except Exception:  # closing a stale client must never break the caller
            logger.debug("closing the previous LLM provider failed", exc_info=True)


def build_provider(choice: str | None = None) -> ChatProvider:
    """A new provider for `choice` (default: settings.LLM_PROVIDER), uncached."""
    choice = (choice or settings.LLM_PROVIDER or "auto").strip().lower()
    if choice not in PROVIDER_CHOICES:
        raise ImproperlyConfigured(
            f"LLM_PROVIDER={choice!r} is not one of {', '.join(PROVIDER_CHOICES)}."
        )
    if choice == "none":
        return NoModelProvider()
    if choice == "openai" or (choice == "auto" and settings.LLM_BASE_URL):
        from chats.agent.llm.openai_compat import OpenAICompatProvider

        return OpenAICompatProvider.from_settings()
    local_provider, why_not = _local_provider()
    if local_provider is not None:
        return local_provider
    if choice == "local":
        return NoModelProvider(reason=f"LLM_PROVIDER=local, but {why_not}.")
    return NoModelProvider()


def _local_provider() -> tuple[ChatProvider | None, str]:
    """The local demo model if its module imports and says it can run, with the reason
    when not."""
    try:
        module = importlib.import_module(LOCAL_MODULE)
    except ImportError as exc:
        return None, f"the local model cannot be loaded ({exc})"
    provider_class = getattr(module, "LocalProvider", None)
    if provider_class is None:
        return None, f"{LOCAL_MODULE} has no LocalProvider"
    try:
        available = bool(provider_class.available())
    except Exception as exc:  # a broken optional extra must not take the site down
        logger.warning("LocalProvider.available() failed: %s", exc)
        return None, f"the local model is unusable ({exc})"
    if not available:
        return None, "the local demo model is not installed (the `local` extra)"
    factory = getattr(provider_class, "from_settings", None)
    return (factory() if callable(factory) else provider_class()), ""


@receiver(setting_changed)
def _forget_provider_when_llm_settings_change(*, setting, **kwargs):
    if setting.startswith("LLM_") or setting == "LOCAL_MODEL_THREADS":
        reset_provider_cache()
