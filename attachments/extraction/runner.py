"""The parent's side of extraction: run the child on one file with a wall-clock timeout and an
address-space limit, and turn whatever happened into text or a reason a person can read. A
hang is killed (its whole process group) at the timeout; a bomb dies of its memory limit;
neither touches the worker that asked."""

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from attachments.extraction.child import MEMORY_EXIT, OCR_MEMORY_EXIT

logger = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
# What a reader's own CPU may take beyond the wall-clock bound: the timeout decides first.
_CPU_GRACE_SECONDS = 5


class ExtractionFailed(Exception):
    """The file could not be read: `str(exc)` is the reason shown to people."""


@dataclass
class ExtractionResult:
    text: str
    page_count: int
    notes: list[str] = field(default_factory=list)
    peak_rss_kb: int = 0
    cpu_seconds: float = 0.0


def child_environment(*, keep: tuple[str, ...] = ()) -> dict[str, str]:
    """Only what a bounded child needs: never the hub's secrets. `keep`: more variables to
    pass on when set (the voice child's HOME). Nothing it loads may fetch from a model hub."""
    env = {
        "PATH": os.defpath,
        "PYTHONPATH": str(PROJECT_ROOT),
        "PYTHONIOENCODING": "utf-8",
        "PYTHONDONTWRITEBYTECODE": "1",
        "LANG": "C.UTF-8",
        # glibc gives each thread its own 64 MB arena of address space: keep the limit for data.
        "MALLOC_ARENA_MAX": "2",
        "HF_HUB_OFFLINE": "1",
    }
    for name in ("TMPDIR", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", *keep):
        if name in os.environ:
            env[name] = os.environ[name]
    return env


def _clean(text: str) -> str:
    """Text any database stores: no NUL, no lone surrogate."""
    return text.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")


def extract_file(
    path: str | os.PathLike,
    file_format: str,
    *,
    seconds: float,
    memory_mb: int,
    max_chars: int,
    max_pages: int,
    ocr_max_pages: int = 0,
    ocr_memory_mb: int = 0,
) -> ExtractionResult:
    """Read `path` as `file_format` in a child process bounded by `seconds` (wall clock) and
    `memory_mb` (address space; `ocr_memory_mb` once OCR reads a scanned PDF page, at most
    `ocr_max_pages` of them, 0 for none). Raises ExtractionFailed with a person's reason."""
    request = {
        "path": str(path),
        "format": file_format,
        "max_chars": max_chars,
        "max_pages": max_pages,
        "memory_mb": memory_mb,
        "cpu_seconds": int(seconds) + _CPU_GRACE_SECONDS,
        "ocr_max_pages": ocr_max_pages if file_format in ("pdf", "image") else 0,
        # OCR stops reading pages at 70% of the wall clock: the text so far is kept (a page
        # takes up to ~10 s on a loaded machine: the rest is its margin).
        "ocr_seconds": seconds * 0.7,
        "ocr_memory_mb": ocr_memory_mb if ocr_max_pages else 0,
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "attachments.extraction.child"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=PROJECT_ROOT,
        env=child_environment(),
        start_new_session=True,  # its own process group: a timeout kills all it started
    )
    try:
        out, err = process.communicate(json.dumps(request).encode(), timeout=seconds)
    except subprocess.TimeoutExpired:
        _kill(process)
        raise ExtractionFailed(
            f"Reading the file took longer than {seconds:g} seconds, so the hub stopped. "
            "Send a smaller file, or the pages you need."
        ) from None
    finally:
        if process.poll() is None:  # an exception of our own while it ran
            _kill(process)
    code = process.returncode
    if code == MEMORY_EXIT or (code == 0 and not out and b"MemoryError" in err):
        raise ExtractionFailed(
            f"Reading the file needed more than {memory_mb} MB of memory, so the hub "
            "stopped. Send a smaller file, or the pages you need."
        )
    if code == OCR_MEMORY_EXIT:
        raise ExtractionFailed(
            f"Reading the {'image' if file_format == 'image' else 'scanned pages'} by OCR "
            f"needed more than {ocr_memory_mb} MB of memory, so the hub stopped."
        )
    if code == -signal.SIGXCPU:
        raise ExtractionFailed(
            f"Reading the file took more than {seconds:g} seconds of processor time, so "
            "the hub stopped."
        )
    if code != 0 or not out:
        tail = err.decode("utf-8", "replace")[-2000:]
        logger.warning("extraction child exited with %s on a %s file: %s", code, file_format, tail)
        raise ExtractionFailed(
            "The reader stopped while reading the file: it may be damaged, or need more than "
            f"{memory_mb} MB of memory."
        )
    if err:
        logger.info("extraction child said: %s", err.decode("utf-8", "replace")[-2000:])
    answer = json.loads(out)
    if not answer["ok"]:
        raise ExtractionFailed(answer["reason"])
    return ExtractionResult(
        text=_clean(answer["text"]),
        page_count=int(answer["page_count"]),
        notes=list(answer["notes"]),
        peak_rss_kb=int(answer.get("peak_rss_kb") or 0),
        cpu_seconds=float(answer.get("cpu_seconds") or 0),
    )


def _kill(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.communicate()
