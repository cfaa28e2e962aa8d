"""Model calls per connection: sequential streamed completions against a local HTTPS server.

    .venv/bin/python bench/keepalive_bench.py [--calls 50] [--runs 5]

Serves the fake OpenAI server (tests/fakes/openai_server.py) over TLS with a self-signed
certificate made on the spot, trusted through SSL_CERT_FILE, and makes `--calls` sequential
`OpenAICompatProvider.stream` calls (a 20-word streamed reply each) with one provider:

- before: the SDK's own stream handling, which closes the response unread after `[DONE]`
  (`chats.agent.llm.keepalive` switched off);
- after: as shipped, the body read to its end once the reply finished.

Measured per configuration: connections the server accepted, calls per connection, and the
median and p95 time of one call (TLS handshakes on loopback are cheap; against a remote
server each one also costs round trips). Each figure is the median over `--runs` runs.
"""

import argparse
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

from common import machine_info, markdown_table, median, percentile  # noqa: E402


def one_run(calls: int, *, reuse: bool) -> tuple[int, float, float]:
    from chats.agent.llm.openai_compat import OpenAICompatProvider
    from tests.fakes.openai_server import FakeOpenAI, filler_text, text
    from tests.fakes.tls import self_signed_certificate

    messages = [{"role": "user", "content": "Hello"}]
    with tempfile.TemporaryDirectory(prefix="hermes-keepalive-") as directory:
        certificate = self_signed_certificate(Path(directory))
        os.environ["SSL_CERT_FILE"] = str(certificate.cert_path)
        with FakeOpenAI(tls=certificate.server_context(), default=text(filler_text(20))) as fake:
            provider = OpenAICompatProvider(base_url=fake.base_url, model="fake-model")
            switched_off = mock.patch(
                "chats.agent.llm.openai_compat.reusable_body", side_effect=lambda stream: None
            )
            durations = []
            with contextlib.nullcontext() if reuse else switched_off:
                for _ in range(calls):
                    started = time.perf_counter()
                    for _event in provider.stream(messages):
                        pass
                    durations.append((time.perf_counter() - started) * 1000)
            provider.close()
            return fake.connections, median(durations), percentile(durations, 95)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    os.environ.setdefault("SECRET_KEY", "bench-only-secret-key")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hermes_site.settings")
    import django

    django.setup()

    rows = []
    for label, reuse in (("before (SDK closes the body unread)", False), ("after", True)):
        results = [one_run(args.calls, reuse=reuse) for _ in range(args.runs)]
        connections = median([r[0] for r in results])
        rows.append(
            [
                label,
                args.calls,
                f"{connections:g}",
                f"{args.calls / connections:.1f}",
                f"{median([r[1] for r in results]):.2f}",
                f"{median([r[2] for r in results]):.2f}",
            ]
        )
    print(", ".join(f"{key}: {value}" for key, value in machine_info().items()))
    print()
    print(
        markdown_table(
            ["configuration", "calls", "connections", "calls/connection", "p50 ms", "p95 ms"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
