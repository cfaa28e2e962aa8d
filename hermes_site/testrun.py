"""`make test`: every check, in order, stopping at the first failure.

1. ruff check and ruff format --check;
2. `manage.py makemigrations --check`;
3. pytest on the configured database (DATABASE_URL; SQLite by default);
4. when that database is not SQLite, the storage tests again on SQLite, so that both
   storage paths are exercised in one run (CI points DATABASE_URL at PostgreSQL).

Without REDIS_URL, a throw-away embedded Valkey serves the run. Extra arguments go to
pytest (e.g. `make test PYTEST_ARGS="-k search"`).

pytest runs in parallel (pytest-xdist): TEST_WORKERS processes (default 4 on these 2-core
machines, since most tests wait on subprocesses, sockets and the database rather than the
CPU; 0 runs serially), whole files to a worker so that a file's fixtures stay together.
Each test process has its own test database and Redis namespace (see settings and
tests/conftest.py). The 20 slowest tests (TEST_DURATIONS; 0 prints every test's time) are
printed at the end of each run, so growth is visible.
"""

import os
import shlex
import subprocess
import sys
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def step(title: str, command: list[str], env: dict[str, str]) -> None:
    print(f"\n==> {title}", flush=True)
    status = subprocess.call(command, cwd=BASE_DIR, env=env)
    if status != 0:
        print(f"\n`make test` failed at: {title} (exit {status})", flush=True)
        sys.exit(status)


def parallel_args(env: dict[str, str]) -> list[str]:
    """pytest's arguments for the parallel run and the slowest-tests report."""
    workers = env.get("TEST_WORKERS", "4").strip() or "4"
    args = [f"--durations={env.get('TEST_DURATIONS', '20').strip() or '20'}"]
    if workers not in ("0", "1"):
        args += ["-n", workers, "--dist", "loadfile"]
    return args


def main() -> None:
    if not os.environ.get("REDIS_URL"):
        from hermes_site.embedded_valkey import run_with_server

        print("REDIS_URL is not set: starting an embedded Valkey for the tests", flush=True)
        sys.exit(run_with_server([sys.executable, "-m", "hermes_site.testrun"]))

    env = dict(os.environ)
    env.setdefault("SECRET_KEY", "test-only-secret-key")
    env.setdefault("DJANGO_SETTINGS_MODULE", "hermes_site.settings")
    # Compiled bytecode under var/pycache, for pytest and every process it starts. The
    # Makefile's PYTHONDONTWRITEBYTECODE keeps __pycache__ out of the checkout, but then each
    # process compiles the project's modules again and pytest rewrites every test module's
    # asserts again: each xdist worker spent ~14 s of CPU collecting the suite (~5 s with
    # the cache), and each daphne, Celery worker, `make run` or manage.py process a test
    # starts (hundreds per run) compiled what it imports. A prefix outside the source tree
    # keeps the checkout as clean (docs/BENCHMARKS.md, "Test suite").
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env.setdefault("PYTHONPYCACHEPREFIX", str(BASE_DIR / "var" / "pycache"))
    pytest_args = shlex.split(env.get("PYTEST_ARGS", "")) + parallel_args(env)
    python = sys.executable

    step("ruff check", [str(BIN / "ruff"), "check", "."], env)
    step("ruff format --check", [str(BIN / "ruff"), "format", "--check", "."], env)
    step(
        "makemigrations --check",
        [python, "manage.py", "makemigrations", "--check", "--dry-run"],
        env,
    )
    database_url = env.get("DATABASE_URL", "")
    on_sqlite = not database_url or database_url.startswith("sqlite")
    label = "SQLite" if on_sqlite else database_url.split(":", 1)[0]
    step(f"pytest on {label}", [python, "-m", "pytest", *pytest_args], env)
    if not on_sqlite:
        sqlite_env = {k: v for k, v in env.items() if k != "DATABASE_URL"}
        sqlite_env.pop("HERMES_REQUIRE_POSTGRES", None)
        step(
            "pytest -m storage on SQLite",
            [python, "-m", "pytest", "-m", "storage", *pytest_args],
            sqlite_env,
        )
    print("\nAll checks passed.", flush=True)


if __name__ == "__main__":
    main()
