"""The transcription child: `python -m voice.child` reads one request (JSON on standard
input), bounds its own address space and CPU time, decodes and splits the audio, and either
transcribes the parts with the local engine ("local") or writes them as WAV files for a
remote engine ("split"). It writes one JSON line per event on standard output:

- {"event": "decoded", "seconds", "parts", "clipped"} once the audio is read;
- {"event": "part", "done", "total"} after each part (local);
- last, {"event": "done", "ok": true, ...} or {"event": "done", "ok": false, "reason"}.

No Django: it imports only numpy, PyAV and (local) faster-whisper, so the web process and
the worker never load the model. Running out of memory exits with MEMORY_EXIT.

Request: {"path", "mode": "local"|"split", "max_seconds", "memory_mb", "cpu_seconds",
"threads", "language" ("" = detect), "model_cache", "model_dir", "out_dir" (split)}.
"""

import json
import os
import resource
import sys
import time
from collections import Counter

MEMORY_EXIT = 3
NO_SPEECH = "No speech was heard in this recording."


def _limit(memory_mb: int, cpu_seconds: int) -> None:
    memory = memory_mb * 1024 * 1024
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_seconds, cpu_seconds + 1))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _peak_rss_kb() -> int:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _emit(**event) -> None:
    sys.stdout.write(json.dumps(event, ensure_ascii=False) + "\n")
    sys.stdout.flush()


def _local(request: dict, samples, parts) -> dict:
    from faster_whisper import WhisperModel

    from voice import audio
    from voice.engine_files import model_dir

    started = time.monotonic()
    folder = model_dir(request["model_cache"], request.get("model_dir") or "")
    model = WhisperModel(
        str(folder), device="cpu", compute_type="int8", cpu_threads=int(request["threads"])
    )
    load_seconds = time.monotonic() - started
    language = request.get("language") or None
    texts, heard = [], Counter()
    for index, (start, end) in enumerate(parts, start=1):
        piece = samples[start:end]
        if audio.has_speech(piece):
            segments, info = model.transcribe(
                audio.to_float(piece),
                language=language,
                beam_size=1,
                vad_filter=True,
                condition_on_previous_text=False,
                without_timestamps=True,
            )
            text = " ".join(s.text.strip() for s in segments).strip()
            if text:
                texts.append(text)
                heard[info.language] += end - start
        _emit(event="part", done=index, total=len(parts))
    if not texts:
        return {"ok": False, "reason": NO_SPEECH}
    joiner = "" if heard and heard.most_common(1)[0][0] in ("zh", "ja") else " "
    return {
        "ok": True,
        "text": joiner.join(texts),
        "language": language or heard.most_common(1)[0][0],
        "languages": [code for code, _ in heard.most_common()],
        "load_seconds": round(load_seconds, 3),
    }


def _split(request: dict, samples, parts) -> dict:
    from voice import audio

    written = []
    for index, (start, end) in enumerate(parts, start=1):
        piece = samples[start:end]
        if not audio.has_speech(piece):
            written.append(None)
            continue
        path = os.path.join(request["out_dir"], f"part-{index:04d}.wav")
        with open(path, "wb") as out:
            out.write(audio.wav_bytes(piece))
        written.append(path)
    if not any(written):
        return {"ok": False, "reason": NO_SPEECH}
    return {"ok": True, "files": written}


def run(request: dict) -> dict:
    from voice import audio

    max_seconds = float(request["max_seconds"])
    try:
        decoded = audio.decode(request["path"], max_seconds=max_seconds)
    except audio.AudioUnreadable as exc:
        return {"ok": False, "reason": str(exc)}
    except audio.AudioTooLong:
        return {"ok": False, "too_long": True, "reason": ""}
    seconds = decoded.seconds
    if seconds < 0.1:
        return {"ok": False, "reason": "The recording is empty: it has no sound."}
    parts = audio.split(decoded.samples)
    _emit(event="decoded", seconds=round(seconds, 3), parts=len(parts), clipped=decoded.clipped)
    if not audio.has_speech(decoded.samples):
        return {"ok": False, "reason": NO_SPEECH, "seconds": seconds}
    if request["mode"] == "split":
        answer = _split(request, decoded.samples, parts)
    else:
        answer = _local(request, decoded.samples, parts)
    answer["seconds"] = round(seconds, 3)
    answer["clipped"] = decoded.clipped
    return answer


def main() -> int:
    request = json.loads(sys.stdin.readline())
    _limit(int(request["memory_mb"]), int(request["cpu_seconds"]))
    try:
        answer = run(request)
    except MemoryError:
        return MEMORY_EXIT
    except Exception as exc:  # noqa: BLE001 - the engine's bug on one file fails that file only
        import traceback

        traceback.print_exc()
        if "memory" in str(exc).lower() and "alloc" in str(exc).lower():
            return MEMORY_EXIT
        answer = {"ok": False, "reason": "The recording could not be transcribed: the engine "
                  "stopped on it."}  # fmt: skip
    answer["peak_rss_kb"] = _peak_rss_kb()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    answer["cpu_seconds"] = round(usage.ru_utime + usage.ru_stime, 3)
    _emit(event="done", **answer)
    return 0


if __name__ == "__main__":
    sys.exit(main())
