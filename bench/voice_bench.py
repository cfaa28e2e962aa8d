"""Voice: what transcribing costs with the default (local) engine.

    .venv/bin/python bench/voice_bench.py [--runs 3] [--long-runs 1] [--lengths 10,60,600]

Speech is made here: espeak-ng (Debian's package) speaks an English text, repeated with short
pauses to each length, encoded as OGG/Opus at 48 kHz mono the way Telegram sends voice notes.
Each file goes through the transcription child exactly as the voice worker runs it
(voice.runner.run_child: a fresh process per file, the model loaded in it, decode, split on
silence, transcribe the parts; VOICE_CPU_THREADS = the machine's cores). Reported per length:
the median wall time (process start to answer), the real-time factor (wall / audio), the
model's load time inside it (the first-use start-up a person waits for on top of the audio),
the child's peak resident memory (VmHWM), the word error rate against the spoken text, and
the load average around the runs (the machine is shared: read RTF with it).
The very first run joins the packaged model's two parts once (reported separately).

Targets (issue 34): real-time factor ≤ 0.5 (a 60 s note in ≤ 30 s), peak RSS ≤ 500 MB.
Prints Markdown for docs/BENCHMARKS.md.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from bench.common import machine_info, markdown_table, median  # noqa: E402
from tests.voice.speech import ENGLISH, encode, espeak, read_samples, word_error_rate  # noqa: E402
from voice.runner import run_child  # noqa: E402

TEXT = (
    ENGLISH
    + " "
    + (
        "Could you also check whether the invoice from March was paid, and send the report "
        "to the whole team before the end of the week?"
    )
)


def speech_of(seconds: float, folder: Path) -> tuple[Path, str]:
    """An OGG/Opus file of about `seconds` of speech, and the text spoken."""
    one = read_samples(espeak(TEXT, folder / "one.wav", voice="en"))
    pause = np.zeros(48000 // 2, np.int16)
    unit = np.concatenate([one, pause])
    count = max(1, round(seconds * 48000 / len(unit)))
    path = encode(np.concatenate([unit] * count), folder / f"speech-{seconds:g}.ogg")
    return path, " ".join([TEXT] * count)


def transcribe(path: Path, cache: Path) -> tuple[float, dict]:
    request = {
        "path": str(path),
        "mode": "local",
        "max_seconds": 3600,
        "threads": os.cpu_count() or 2,
        "language": "",
        "model_cache": str(cache),
        "model_dir": "",
        "out_dir": "",
    }
    started = time.monotonic()
    answer = run_child(request, seconds=3600, memory_mb=2048)
    return time.monotonic() - started, answer


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--long-runs", type=int, default=1, help="runs of lengths over 120 s")
    parser.add_argument("--lengths", default="10,60,600")
    args = parser.parse_args()
    lengths = [float(value) for value in args.lengths.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="voice-bench-") as folder:
        folder = Path(folder)
        cache = folder / "models"
        started = time.monotonic()
        from voice.engine_files import model_dir

        model_dir(cache)
        join_seconds = time.monotonic() - started
        for seconds in lengths:
            path, spoken = speech_of(seconds, folder)
            runs = args.runs if seconds <= 120 else args.long_runs
            walls, loads, rss, wers, audio = [], [], [], [], 0.0
            load_before = os.getloadavg()[0]
            for _ in range(runs):
                wall, answer = transcribe(path, cache)
                audio = answer["seconds"]
                walls.append(wall)
                loads.append(answer["load_seconds"])
                rss.append(answer["peak_rss_kb"] / 1024)
                wers.append(word_error_rate(spoken, answer["text"]))
            wall = median(walls)
            rows.append(
                [
                    f"{audio:.0f} s",
                    runs,
                    round(wall, 1),
                    round(wall / audio, 2),
                    round(median(loads), 1),
                    round(max(rss)),
                    round(median(wers), 3),
                    f"{load_before:.1f} → {os.getloadavg()[0]:.1f}",
                ]
            )
            print(rows[-1], file=sys.stderr, flush=True)
    info = machine_info()
    print("Machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    print(f"\nJoining the packaged model's parts (first use only): {join_seconds:.1f} s\n")
    print(
        markdown_table(
            [
                "speech",
                "runs",
                "wall s (median)",
                "real-time factor",
                "model load s",
                "peak RSS MB",
                "WER",
                "load avg",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
