"""Attachments: what files cost the hub, part by part.

    .venv/bin/python bench/attachments_bench.py [--only extraction] [--runs 3]
        [--xlsx-mb 50] [--pdf-pages 300]

Parts (`--only` takes a comma-separated list; default: all):

- `extraction`: the document reader as the files' worker runs it (attachments.extraction:
  one child process per file, bounded by ATTACHMENTS_EXTRACT_SECONDS and
  ATTACHMENTS_EXTRACT_MEMORY_MB) on a generated 300-page text PDF and a generated ~50 MB
  XLSX (about a million rows of ids, dates, categories, regions, amounts and unique
  descriptions, the strings in the shared strings part, as Excel writes them). Each file
  is read `--runs` times with the hub's default caps (what the hub stores), and a smaller
  XLSX (`--xlsx-full-mb`) once with the text cap lifted (every cell read: what a raised
  cap costs per MB). Reported per file: the median wall time (child start to answer,
  Python's start included), the child's CPU time (user + system: what the machine's load
  does not inflate), its peak resident memory (VmHWM), pages and characters stored, and
  the load average around it.
  Targets (issue 33): PDF ≤ 10 s, XLSX ≤ 60 s, peak RSS ≤ 300 MB.

- `ocr`: scanned pages read by OCR in the same child (attachments/extraction/ocr.py,
  RapidOCR on ONNX Runtime, OCR bound ATTACHMENTS_OCR_MEMORY_MB): image-only PDFs of 1 and
  `--ocr-pages` A4 pages (150 dpi, 20 lines of text each, drawn by Pillow), each read
  `--runs` times. Reported: the median wall time, CPU time, seconds per page (the engine's
  load included in the 1-page file; the difference between the two files per extra page),
  the child's peak RSS, and the load average.

Other parts (an image turn's overhead, the dashboard's upload) are added here as `PARTS`
entries. Prints Markdown for docs/BENCHMARKS.md.
"""

import argparse
import os
import random
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.common import machine_info, markdown_table, median  # noqa: E402

# The hub's defaults (hermes_site/settings.py), read here without starting Django.
DEFAULT_SECONDS = 60.0
DEFAULT_MEMORY_MB = 512
DEFAULT_MAX_CHARS = 1_000_000
DEFAULT_MAX_PAGES = 2000
DEFAULT_OCR_MAX_PAGES = 20
DEFAULT_OCR_MEMORY_MB = 1536
MB = 1024 * 1024


def _load() -> str:
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def write_xlsx(path: Path, target_mb: float) -> int:
    """A workbook of about `target_mb` MB, as Excel writes one (cells' strings in the shared
    strings part); returns its row count. The sheet's XML is written here directly, streamed
    into the zip: XlsxWriter and openpyxl take minutes for a million rows."""
    import io
    import zipfile

    import openpyxl

    rng = random.Random(33)
    categories = [f"category {n:02d}" for n in range(24)]
    regions = ["north", "south", "east", "west", "华东", "华南"]
    header = ["id", "day", "category", "region", "amount", "qty", "description"]
    start = date(2024, 1, 1)
    days = [(start + timedelta(days=n)).isoformat() for n in range(900)]
    fixed = header + categories + regions + days  # shared strings 0 … len(fixed) - 1
    base = len(fixed)
    rows = int(target_mb * MB / 49)  # measured: about 49 bytes a row, packed
    template = io.BytesIO()
    workbook = openpyxl.Workbook()
    workbook.active.title = "Orders"
    workbook.active["A1"] = "id"
    workbook.save(template)
    source = zipfile.ZipFile(template)
    main = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as out:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "[Content_Types].xml" and b"sharedStrings" not in data:
                data = data.replace(
                    b"</Types>",
                    b'<Override PartName="/xl/sharedStrings.xml" ContentType="application/'
                    b'vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/>'
                    b"</Types>",
                )
            if item.filename not in ("xl/worksheets/sheet1.xml", "xl/sharedStrings.xml"):
                out.writestr(item, data)
        with out.open("xl/sharedStrings.xml", "w", force_zip64=True) as part:
            part.write(f'<sst {main} count="{base + rows}" uniqueCount="{base + rows}">'.encode())
            part.write("".join(f"<si><t>{text}</t></si>" for text in fixed).encode())
            for row in range(1, rows + 1):
                described = f"order {row:07d} for {rng.getrandbits(40):010x}"
                part.write(f"<si><t>{described}</t></si>".encode())
            part.write(b"</sst>")
        with out.open("xl/worksheets/sheet1.xml", "w", force_zip64=True) as part:
            part.write(f"<worksheet {main}><sheetData>".encode())
            cells = "".join(f'<c r="{"ABCDEFG"[n]}1" t="s"><v>{n}</v></c>' for n in range(7))
            part.write(f'<row r="1">{cells}</row>'.encode())
            chunk = []
            for row in range(1, rows + 1):
                r = row + 1
                chunk.append(
                    f'<row r="{r}"><c r="A{r}"><v>{row}</v></c>'
                    f'<c r="B{r}" t="s"><v>{37 + row % 900}</v></c>'
                    f'<c r="C{r}" t="s"><v>{7 + row % 24}</v></c>'
                    f'<c r="D{r}" t="s"><v>{31 + rng.randrange(6)}</v></c>'
                    f'<c r="E{r}"><v>{rng.uniform(1, 5000):.2f}</v></c>'
                    f'<c r="F{r}"><v>{rng.randrange(1, 50)}</v></c>'
                    f'<c r="G{r}" t="s"><v>{base + row - 1}</v></c></row>'
                )
                if len(chunk) == 10_000:
                    part.write("".join(chunk).encode())
                    chunk = []
            part.write("".join(chunk).encode())
            part.write(b"</sheetData></worksheet>")
    return rows


def _read(path: Path, file_format: str, *, max_chars: int):
    from attachments.extraction.runner import extract_file

    started = time.perf_counter()
    result = extract_file(
        path,
        file_format,
        seconds=600,  # the bench measures; the hub's bound is DEFAULT_SECONDS
        memory_mb=DEFAULT_MEMORY_MB,
        max_chars=max_chars,
        max_pages=DEFAULT_MAX_PAGES,
    )
    return time.perf_counter() - started, result


def part_extraction(args) -> str:
    from tests.attachments.documents import text_pdf

    lines = []
    with tempfile.TemporaryDirectory(prefix="hub-bench-files-") as folder:
        pdf = Path(folder) / "report.pdf"
        pdf.write_bytes(text_pdf(args.pdf_pages))
        xlsx = Path(folder) / "orders.xlsx"
        started = time.perf_counter()
        rows = write_xlsx(xlsx, args.xlsx_mb)
        lines.append(
            f"Generated: a {args.pdf_pages}-page PDF of {pdf.stat().st_size / MB:.1f} MB (40 "
            f"lines a page) and an XLSX of {xlsx.stat().st_size / MB:.1f} MB ({rows:,} rows × "
            f"7 columns, written in {time.perf_counter() - started:.0f} s)."
        )
        runs = args.runs
        cases = [
            (f"PDF, {args.pdf_pages} pages", pdf, "pdf", DEFAULT_MAX_CHARS, args.runs),
            (f"XLSX, {xlsx.stat().st_size / MB:.0f} MB", xlsx, "xlsx", DEFAULT_MAX_CHARS, runs),
        ]
        if args.xlsx_full_mb:
            whole = Path(folder) / "whole.xlsx"
            write_xlsx(whole, args.xlsx_full_mb)
            label = f"XLSX, {whole.stat().st_size / MB:.0f} MB, text cap lifted (every cell)"
            cases.append((label, whole, "xlsx", 10**10, 1))
        table = []
        for label, path, file_format, max_chars, runs in cases:
            before = _load()
            seconds, cpu, peaks = [], [], []
            for _ in range(runs):
                elapsed, result = _read(path, file_format, max_chars=max_chars)
                seconds.append(elapsed)
                cpu.append(result.cpu_seconds)
                peaks.append(result.peak_rss_kb / 1024)
            table.append(
                [
                    label,
                    runs,
                    f"{median(seconds):.2f}",
                    f"{min(seconds):.2f}–{max(seconds):.2f}",
                    f"{median(cpu):.2f}",
                    f"{median(peaks):.0f}",
                    f"{max(peaks):.0f}",
                    f"{result.page_count:,}",
                    f"{len(result.text):,}",
                    f"{before} → {_load()}",
                ]
            )
            print(f"  {label}: {median(seconds):.2f} s, {max(peaks):.0f} MB", file=sys.stderr)
    lines.append("")
    lines.append(
        markdown_table(
            [
                "file",
                "runs",
                "median s",
                "range s",
                "median CPU s",
                "median peak RSS MB",
                "max peak RSS MB",
                "pages",
                "characters stored",
                "load average (1, 5, 15 min) before → after",
            ],
            table,
        )
    )
    return "\n".join(lines)


def part_ocr(args) -> str:
    from attachments.extraction.runner import extract_file
    from tests.attachments.documents import scanned_pdf

    def page(n: int) -> list[str]:
        return [
            f"Line {row} of page {n}: restart the billing queue {n * 100 + row}"
            for row in range(20)
        ]

    table, medians = [], {}
    with tempfile.TemporaryDirectory(prefix="hub-bench-ocr-") as folder:
        for count in (1, args.ocr_pages):
            path = Path(folder) / f"scan-{count}.pdf"
            path.write_bytes(scanned_pdf([page(n) for n in range(1, count + 1)], font_size=28))
            before = _load()
            seconds, cpu, peaks = [], [], []
            for _ in range(args.runs):
                started = time.perf_counter()
                result = extract_file(
                    path,
                    "pdf",
                    seconds=600,  # the bench measures; the hub's bound is DEFAULT_SECONDS
                    memory_mb=DEFAULT_MEMORY_MB,
                    max_chars=DEFAULT_MAX_CHARS,
                    max_pages=DEFAULT_MAX_PAGES,
                    ocr_max_pages=max(count, DEFAULT_OCR_MAX_PAGES),
                    ocr_memory_mb=DEFAULT_OCR_MEMORY_MB,
                )
                seconds.append(time.perf_counter() - started)
                cpu.append(result.cpu_seconds)
                peaks.append(result.peak_rss_kb / 1024)
                assert f"page {count}" in result.text, result.notes  # it did read them
            medians[count] = (median(seconds), median(cpu))
            table.append(
                [
                    f"scanned PDF, {count} page{'s' if count > 1 else ''}",
                    args.runs,
                    f"{median(seconds):.2f}",
                    f"{min(seconds):.2f}–{max(seconds):.2f}",
                    f"{median(cpu):.2f}",
                    f"{median(seconds) / count:.2f}",
                    f"{median(peaks):.0f}",
                    f"{max(peaks):.0f}",
                    f"{before} → {_load()}",
                ]
            )
            print(f"  {count} pages: {median(seconds):.2f} s, {max(peaks):.0f} MB", file=sys.stderr)
    extra = args.ocr_pages - 1
    per_page = (medians[args.ocr_pages][0] - medians[1][0]) / extra if extra else 0
    per_page_cpu = (medians[args.ocr_pages][1] - medians[1][1]) / extra if extra else 0
    return "\n".join(
        [
            markdown_table(
                [
                    "file",
                    "runs",
                    "median s",
                    "range s",
                    "median CPU s",
                    "s per page (whole file)",
                    "median peak RSS MB",
                    "max peak RSS MB",
                    "load average (1, 5, 15 min) before → after",
                ],
                table,
            ),
            "",
            f"Each page past the first: {per_page:.2f} s ({per_page_cpu:.2f} s CPU).",
        ]
    )


PARTS = {"extraction": part_extraction, "ocr": part_ocr}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default=",".join(PARTS), help="parts: " + ", ".join(PARTS))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--pdf-pages", type=int, default=300)
    parser.add_argument("--xlsx-mb", type=float, default=50)
    parser.add_argument(
        "--xlsx-full-mb",
        type=float,
        default=5,
        help="size of a second XLSX read once with the text cap lifted (0: none)",
    )
    parser.add_argument("--ocr-pages", type=int, default=4, help="pages of the `ocr` part's file")
    args = parser.parse_args()
    parts = [part.strip() for part in args.only.split(",") if part.strip()]
    unknown = [part for part in parts if part not in PARTS]
    if unknown:
        parser.error(f"unknown part(s) {', '.join(unknown)}; known: {', '.join(PARTS)}")
    info = machine_info()
    print("Machine: " + "; ".join(f"{key} {value}" for key, value in info.items()))
    for part in parts:
        print(f"\n### {part}\n")
        print(PARTS[part](args))


if __name__ == "__main__":
    main()
