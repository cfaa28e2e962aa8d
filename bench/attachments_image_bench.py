"""Benchmark: what an image adds to a turn, and what the files' hook costs a chat without files.

    .venv/bin/python bench/attachments_image_bench.py [--runs 30] [--megapixels 12]
                                                      [--database-url postgres://…]

Whole turns in-process (turn requested → claim → context build → the request to the fake
OpenAI server on loopback, real HTTP → reply stored), each in a fresh API chat with a
40-message history (so every sample sends one photo, not the photos of earlier samples):

- a text turn;
- an image turn for a vision model (LLM_MODEL=gpt-4o): the photo as a person sends it (a
  JPEG of `--megapixels` with camera noise, several MB, not resized first) stored with
  `attachment_store`, then sent as an image part. "first" is the first turn that sends the
  photo (its blob read and base64-encoded), "again" a later turn (the process's cache);
- the same image turn for a model without vision (the note instead of the image).

Each variant alternates with the text turn (paired runs); the overhead is the median of the
paired differences. Target: an image turn ≤ 50 ms over a text turn.

Then the hook rule (bench/context_bench.py): `build_context` on a chat with no files, with
and without the attachments' message parts provider registered: ≤ 0.5 ms. Needs REDIS_URL.
"""

import argparse
import io
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

TARGET_MS = 50.0
HOOK_LIMIT_MS = 0.5


def photo(megapixels: float, seed: int = 5) -> bytes:
    """A camera-like JPEG: 4:3, noisy (so it compresses like a photo), EXIF included."""
    from PIL import Image

    width = int((megapixels * 1_000_000 * 4 / 3) ** 0.5)
    height = width * 3 // 4
    rnd = random.Random(seed)
    size = (width // 4, height // 4)
    small = Image.frombytes("RGB", size, rnd.randbytes(size[0] * size[1] * 3))
    image = small.resize((width, height))
    exif = Image.Exif()
    exif[0x010F] = "BenchCam"
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG", quality=90, exif=exif.tobytes())
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--megapixels", type=float, default=12.0)
    parser.add_argument("--history", type=int, default=40)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    os.environ.setdefault("REDIS_KEY_PREFIX", f"hermes-bench-{os.getpid()}")

    with (
        common.temporary_database(args.database_url, label="images") as url,
        tempfile.TemporaryDirectory(prefix="hermes-bench-blobs-") as blobs,
    ):
        os.environ["ATTACHMENTS_STORAGE_OPTIONS"] = json.dumps({"location": blobs})
        common.setup_django(url)
        common.migrate()
        rows, hook_rows, size = run(args)
        backend = common.database_description()
        common.close_django_connections()

    info = common.machine_info()
    print(
        f"## Image turn overhead: {args.megapixels:g} MP JPEG ({size / 1e6:.1f} MB, as received), "
        f"{args.history}-message history, {backend}, {args.runs} paired runs\n"
    )
    print(common.markdown_table(["turn", "p50 ms", "p95 ms", "overhead p50 ms", "verdict"], rows))
    print(f"\nMachine: {info['CPU']}, {info['cores']} cores, Python {info['Python']}")
    print(f"Load average: {' '.join(f'{v:.2f}' for v in os.getloadavg())}\n")
    print("## The message parts hook on a chat without files (CPU medians)\n")
    print(common.markdown_table(["build_context", "CPU p50 ms", "verdict"], hook_rows))


def run(args):
    from django.conf import settings

    from attachments.services import attachment_store
    from chats.agent.context import build_context
    from chats.agent.llm import get_provider, reset_provider_cache
    from chats.agent.loop import run_claimed_turn
    from chats.agent.registry import TurnContext, registry
    from chats.agent.turns import message_received, turn_claim
    from chats.models import Message
    from chats.services import message_ingest
    from tests.fakes.openai_server import FakeOpenAI

    data = photo(args.megapixels)
    texts = common.MessageTextGenerator(seed=11)
    counter = iter(range(1_000_000))

    stored_ms: list[float] = []

    def fresh_chat() -> str:
        """A chat with the same kind of history for every sample: one photo per sample."""
        chat_id = f"c{next(counter)}"
        for index in range(args.history):
            message_ingest(
                channel="api", chat_id=chat_id, user_id="u2",
                message_id=f"h{chat_id}-{index}", text=texts.text(),
            )  # fmt: skip
        return chat_id

    def turn(with_photo: bool) -> tuple[float, float]:
        """One turn in a fresh chat, timed from the stored message (and file) to the reply:
        (wall ms, CPU ms of this thread: the hub's work, not the fake server's threads)."""
        result = message_ingest(
            channel="api", chat_id=fresh_chat(), user_id="u1", message_id=f"m{next(counter)}",
            text="What does this show? " + texts.text(),
        )  # fmt: skip
        if with_photo:
            started = time.perf_counter()
            attachment_store(message=result.message, name="IMG_0001.jpg", data=data)
            stored_ms.append((time.perf_counter() - started) * 1000)
        started, cpu = time.perf_counter(), time.thread_time()
        queued = message_received(result, enqueue=False)
        claim = turn_claim(turn_id=queued.pk, worker="bench")
        run_claimed_turn(claim.turn, provider=get_provider())
        wall = (time.perf_counter() - started) * 1000
        cpu = (time.thread_time() - cpu) * 1000
        fake.reset()  # the fake keeps every request's body: drop the megabytes
        return wall, cpu

    rows = []
    fake = FakeOpenAI(context_window=None).start()
    try:
        settings.LLM_PROVIDER = "openai"
        settings.LLM_BASE_URL = fake.base_url
        settings.LLM_CONTEXT_TOKENS = 128_000
        settings.VISION_LLM_MODEL = ""
        for model, label in (("gpt-4o", "vision model"), ("fake-model", "no vision: the note")):
            settings.LLM_MODEL = model
            reset_provider_cache()
            for _ in range(3):
                turn(False)
            first_wall, first_cpu = turn(True)  # the photo's first trip: blob read, base64
            text_runs, image_runs = [], []
            for _ in range(args.runs):
                text_runs.append(turn(False))
                image_runs.append(turn(True))
            for index, kind in ((1, "CPU"), (0, "wall")):
                texts_ms = [sample[index] for sample in text_runs]
                images_ms = [sample[index] for sample in image_runs]
                pairs = zip(images_ms, texts_ms, strict=True)
                overhead = common.median([i - t for i, t in pairs])
                verdict = ("meets" if overhead <= TARGET_MS else "MISSES") if index == 1 else ""
                rows.append([f"text turn ({label}), {kind}", *_p(texts_ms), "", ""])
                rows.append(
                    [f"image turn ({label}), {kind}", *_p(images_ms), round(overhead, 2), verdict]
                )
            rows.append(
                [
                    f"first image turn ({label}), CPU / wall",
                    round(first_cpu, 2),
                    round(first_wall, 2),
                    "",
                    "",
                ]
            )
        rows.append(
            ["storing the photo (sniff, SHA-256, blob), before the turn", *_p(stored_ms), "", ""]
        )

        # The hook on a chat without files: with and without the provider registered.
        trigger = Message.objects.filter(role="user", attachments__isnull=True).last()
        context = TurnContext(chat=trigger.chat, trigger=trigger)
        info = get_provider().info
        saved = dict(registry.message_parts)

        def build():
            build_context(
                chat=trigger.chat, trigger=trigger, provider_info=info, tool_specs=[],
                turn_context=context,
            )  # fmt: skip

        with_hook, without = [], []
        for _ in range(max(args.runs, 60)):
            registry.message_parts.clear()
            started = time.process_time()
            build()
            without.append((time.process_time() - started) * 1000)
            registry.message_parts.update(saved)
            started = time.process_time()
            build()
            with_hook.append((time.process_time() - started) * 1000)
        added = common.median([w - wo for w, wo in zip(with_hook, without, strict=True)])
        hook_rows = [
            ["without the hook", round(common.median(without), 3), ""],
            ["with the attachments hook", round(common.median(with_hook), 3), ""],
            ["difference", round(added, 3), "ok" if added <= HOOK_LIMIT_MS else "FAIL"],
        ]
    finally:
        fake.stop()
    return rows, hook_rows, len(data)


def _p(values):
    return [round(common.percentile(values, 50), 2), round(common.percentile(values, 95), 2)]


if __name__ == "__main__":
    main()
