"""Engine overhead: from ingesting a message to the model receiving its first request.

    .venv/bin/python bench/engine_bench.py [--turns 60] [--history 200]
        [--database-url postgres://postgres@127.0.0.1:5432/test]

With an instant fake model (the test suite's fake OpenAI server on loopback), each sample
times: `message_ingest` → `turn_request` → `turn_claim` → compression check → context build
→ provider request → the fake server's handler starts. That is everything the engine adds
before a model could start thinking. The chat holds `--history` earlier messages. Needs
REDIS_URL (events and interrupt flags); `make bench` provides one. Target: p50 <= 50 ms.
"""

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from common import (  # noqa: E402
    MessageTextGenerator,
    database_description,
    machine_info,
    markdown_table,
    migrate,
    percentile,
    setup_django,
    temporary_database,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=60)
    parser.add_argument("--history", type=int, default=200)
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    os.environ.setdefault("REDIS_KEY_PREFIX", f"hermes-bench-{os.getpid()}")

    with temporary_database(args.database_url, label="engine") as url:
        setup_django(url)
        migrate()
        from django.conf import settings

        from chats.agent.llm import get_provider
        from chats.agent.loop import run_claimed_turn
        from chats.agent.turns import message_received, turn_claim
        from chats.services import message_ingest
        from tests.fakes.openai_server import FakeOpenAI, text

        arrivals: list[float] = []

        def instant(body):
            arrivals.append(time.perf_counter())
            return text("ok")

        texts = MessageTextGenerator(seed=3)
        with FakeOpenAI(default=instant) as fake:
            settings.LLM_PROVIDER = "openai"
            settings.LLM_BASE_URL = fake.base_url
            settings.LLM_MODEL = fake.model
            settings.LLM_CONTEXT_TOKENS = 128_000
            provider = get_provider()
            for index in range(args.history):
                message_ingest(
                    channel="api",
                    chat_id="bench",
                    user_id=f"u{index % 5}",
                    message_id=f"h{index}",
                    text=texts.text(),
                )
            samples = []
            for index in range(args.turns + 3):
                started = time.perf_counter()
                result = message_ingest(
                    channel="api",
                    chat_id="bench",
                    user_id="u1",
                    message_id=f"t{index}",
                    text=texts.text(),
                )
                turn = message_received(result, enqueue=False)
                claim = turn_claim(turn_id=turn.pk, worker="bench")
                run_claimed_turn(claim.turn, provider=provider)
                if index >= 3:  # warm-up: connections, caches, the tokenizer
                    samples.append((arrivals[-1] - started) * 1000)
        backend = database_description()

    info = machine_info()
    print(f"Engine overhead to the first model request on {backend}, {args.turns} turns, ")
    print(f"{args.history}-message history, instant fake model")
    print(f"Machine: {info['CPU']}, {info['cores']} cores, Python {info['Python']}\n")
    rows = [("ingest → first model request", percentile(samples, 50), percentile(samples, 95))]
    print(markdown_table(["path", "p50 ms", "p95 ms"], rows))


if __name__ == "__main__":
    main()
