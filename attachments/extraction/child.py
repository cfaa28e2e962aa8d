"""The extraction child: `python -m attachments.extraction.child` reads one request (JSON on
standard input), bounds its own address space and CPU time first, reads the file and writes
one JSON answer on standard output. No Django: it imports only its reader.

Request: {"path", "format": pdf|docx|xlsx|pptx|html|text|image, "max_chars", "max_pages",
"memory_mb", "cpu_seconds", and for OCR of scanned PDF pages "ocr_max_pages" (0: off),
"ocr_seconds", "ocr_memory_mb"}. Answer: {"ok": true, "text", "page_count", "notes",
"peak_rss_kb", "cpu_seconds"} or {"ok": false, "reason"}. Running out of memory exits
with MEMORY_EXIT (printing may fail then too); the parent reads any other death as a
crash."""

import json
import resource
import sys
import time
import traceback

MEMORY_EXIT = 3
OCR_MEMORY_EXIT = 4  # ran out of memory after OCR raised the bound to the OCR's


def _memory_exit(memory_mb: int) -> int:
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    if soft != resource.RLIM_INFINITY and soft > memory_mb * 1024 * 1024:
        return OCR_MEMORY_EXIT
    return MEMORY_EXIT


def _limit(memory_mb: int, cpu_seconds: int, ocr_memory_mb: int = 0) -> None:
    """`memory_mb` bounds the readers; OCR, when asked, may raise the soft limit to
    `ocr_memory_mb` (the hard one) before its engine loads (extraction/ocr.py)."""
    memory = memory_mb * 1024 * 1024
    ceiling = max(memory, ocr_memory_mb * 1024 * 1024)
    resource.setrlimit(resource.RLIMIT_AS, (memory, ceiling))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def _near_memory_bound(memory_mb: int) -> bool:
    """Whether this process's address space came within 10% of its bound: libraries such as
    lxml report a failed allocation as a parse error ("unknown error"), not a MemoryError."""
    peak = _status_kb("VmPeak")
    soft = resource.getrlimit(resource.RLIMIT_AS)[0]  # OCR may have raised it
    if soft != resource.RLIM_INFINITY:
        memory_mb = max(memory_mb, soft // (1024 * 1024))
    return peak is not None and peak >= memory_mb * 1024 * 0.9


def _peak_rss_kb() -> int:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited from the
    parent across fork and exec)."""
    peak = _status_kb("VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _read(request: dict):
    from attachments.extraction.pages import PageSink

    sink = PageSink(int(request["max_chars"]))
    path, kind = request["path"], request["format"]
    if kind == "pdf":
        from attachments.extraction.pdf import read_pdf

        ocr = None
        if int(request.get("ocr_max_pages") or 0) > 0:
            from attachments.extraction.ocr import OcrReader

            ocr = OcrReader(
                max_pages=int(request["ocr_max_pages"]),
                deadline=time.monotonic() + float(request["ocr_seconds"]),
            )
        return read_pdf(path, sink, max_pages=int(request["max_pages"]), ocr=ocr)
    if kind == "image":
        from attachments.extraction.ocr import OcrReader, read_image_text

        ocr = OcrReader(max_pages=1, deadline=time.monotonic() + float(request["ocr_seconds"]))
        return read_image_text(path, sink, ocr)
    if kind in ("docx", "xlsx", "pptx"):
        from attachments.extraction import office

        return getattr(office, f"read_{kind}")(path, sink)
    from attachments.extraction.text import read_html, read_text

    return read_html(path, sink) if kind == "html" else read_text(path, sink)


def main() -> int:
    request = json.loads(sys.stdin.read())
    memory_mb = int(request["memory_mb"])
    ocr_memory_mb = int(request.get("ocr_memory_mb") or 0)
    _limit(memory_mb, int(request["cpu_seconds"]), ocr_memory_mb)
    from attachments.extraction.pages import Unreadable

    try:
        extracted = _read(request)
    except MemoryError:
        return _memory_exit(memory_mb)
    except Unreadable as exc:
        if _near_memory_bound(memory_mb):
            # a library that reported running out of memory as a bad file
            return _memory_exit(memory_mb)
        answer = {"ok": False, "reason": str(exc)}
    except RecursionError:
        answer = {"ok": False, "reason": "The file is nested too deeply to be read."}
    except Exception as exc:  # noqa: BLE001 - a reader's bug on a strange file fails it only
        said = str(exc).lower()
        if (
            _near_memory_bound(memory_mb)
            or "memory allocation failed" in said
            or "bad_alloc" in said
            or "failed to map segment" in said
        ):
            return _memory_exit(memory_mb)
        traceback.print_exc()
        answer = {
            "ok": False,
            "reason": "The file could not be read: it looks damaged, or uses something the "
            "reader does not support.",
        }
    else:
        answer = {
            "ok": True,
            "text": extracted.text,
            "page_count": extracted.page_count,
            "notes": extracted.notes,
            "peak_rss_kb": _peak_rss_kb(),
            "cpu_seconds": _cpu_seconds(),
        }
    try:
        sys.stdout.write(json.dumps(answer))
        sys.stdout.flush()
    except MemoryError:
        return _memory_exit(memory_mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
