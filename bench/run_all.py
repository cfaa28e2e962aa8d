"""Run every benchmark in bench/ and print their tables (copy them to docs/BENCHMARKS.md).

    make bench                      # SQLite, with a throw-away embedded Valkey
    make bench BENCH_POSTGRES=postgres://postgres@127.0.0.1:5432/test   # PostgreSQL too

Each script builds its own temporary database; nothing touches real data.
"""

import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
RUNS = [
    ["ingest_bench.py", "--messages", "5000", "--runs", "7"],
    ["search_bench.py", "--messages", "100000", "--runs", "5"],
    ["context_bench.py", "--gc-freeze"],
    ["engine_bench.py", "--turns", "60"],
    ["ws_bench.py", "--clients", "200", "--chats", "50"],
    ["telegram_bench.py", "--runs", "3", "--seconds", "10"],
    ["memory_bench.py", "--runs", "200"],
    ["skills_bench.py", "--runs", "100"],
    ["learning_bench.py", "--runs", "5", "--turns", "40"],
    ["keepalive_bench.py", "--calls", "50", "--runs", "5"],
    ["tools_bench.py", "--runs", "200"],
    ["schedules_bench.py", "--schedules", "1000", "--runs", "3"],
    ["trace_overhead.py", "--runs", "7"],
]
POSTGRES_RUNS = [
    ["ingest_bench.py", "--messages", "5000", "--runs", "5"],
    ["search_bench.py", "--messages", "100000", "--runs", "5"],
    ["context_bench.py", "--gc-freeze"],
    ["memory_bench.py", "--runs", "200"],
    ["skills_bench.py", "--runs", "100"],
    ["learning_bench.py", "--runs", "5", "--turns", "40"],
    ["tools_bench.py", "--runs", "200"],
    ["schedules_bench.py", "--schedules", "1000", "--runs", "3"],
]


def main() -> int:
    postgres = os.environ.get("BENCH_POSTGRES", "")
    plan = [(run, None) for run in RUNS] + [(run, postgres) for run in POSTGRES_RUNS if postgres]
    failed = 0
    for arguments, database_url in plan:
        command = [sys.executable, str(BENCH / arguments[0]), *arguments[1:]]
        if database_url:
            command += ["--database-url", database_url]
        print(
            f"\n### {' '.join(arguments)}{' on PostgreSQL' if database_url else ''}\n", flush=True
        )
        failed += subprocess.call(command) != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
