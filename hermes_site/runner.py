"""`make run`: prepare the database and start the whole product under one supervisor.

Processes (hermes_site/supervisor.py): the embedded Valkey (unless REDIS_URL is set; with
an append-only file under var/valkey), daphne serving HTTP and WebSockets on
127.0.0.1:PORT (as hermes_site.webserver, which refuses a body past its path's limit
before reading it), a Celery worker with its embedded beat (the periodic turn sweep), a second
worker for background reviews (queue "<REDIS_KEY_PREFIX>-reviews"; the files' (knowledge's
too) and the voice queues too), a third
for the schedules' dispatcher (queue "<REDIS_KEY_PREFIX>-schedules", solo pool), and the
Telegram bridge when TELEGRAM_BOT_TOKEN is set. All of them write their Prometheus counters
to one directory (PROMETHEUS_MULTIPROC_DIR, var/prometheus by default), so /metrics on the
web process reports the workers' counters too. A process that exits is restarted (with
backoff, logged); Ctrl-C stops them all.
"""

import os
import secrets
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from dotenv import load_dotenv

from hermes_site.embedded_valkey import wait_until_ready
from hermes_site.supervisor import Program, Supervisor

BASE_DIR = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def prepare_environment() -> dict[str, str]:
    """The environment every process gets: .env, then the key in var/secret_key (generated
    on the first run) if no SECRET_KEY is set."""
    load_dotenv(BASE_DIR / ".env", override=False)
    env = dict(os.environ)
    var_dir = Path(env.get("HERMES_VAR_DIR") or BASE_DIR / "var")
    var_dir.mkdir(parents=True, exist_ok=True)
    if not env.get("SECRET_KEY"):
        env["SECRET_KEY"] = ensure_secret_key(var_dir / "secret_key")
    env.setdefault("PORT", "8000")
    env.setdefault("PYTHONUNBUFFERED", "1")
    if not env.get("PROMETHEUS_MULTIPROC_DIR"):
        env["PROMETHEUS_MULTIPROC_DIR"] = str(fresh_metrics_dir(var_dir / "prometheus"))
    return env


def fresh_metrics_dir(directory: Path) -> Path:
    """The directory every process of this run writes its Prometheus counters to (the
    multiprocess mode of prometheus_client, summed by /metrics), emptied of an earlier run's
    files: counters restart at zero with the processes, which Prometheus expects. Only the
    default directory under var/ is emptied; one set in the environment is used as it is."""
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob("*.db"):
        stale.unlink(missing_ok=True)
    return directory


def ensure_secret_key(key_file: Path) -> str:
    """The key in `key_file`, generated there first if it is missing or empty. The file is
    created readable by its owner only; settings read it for every other entry point
    (manage.py in a second terminal), which never generate one themselves."""
    key = key_file.read_text().strip() if key_file.exists() else ""
    if key:
        return key
    key = secrets.token_urlsafe(50)
    partial = key_file.with_name(f".{key_file.name}.{os.getpid()}")
    # Created 0600 from the start, so the key is never readable by others, not even briefly.
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as file:
        file.write(key + "\n")
    os.replace(partial, key_file)
    return key


def manage(env: dict[str, str], *args: str) -> str:
    """Run a management command, echo and return its output; stop `make run` if it fails."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args], cwd=BASE_DIR, env=env, capture_output=True, text=True
    )
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.returncode != 0:
        sys.exit(f"`manage.py {' '.join(args)}` failed (exit {result.returncode})")
    return result.stdout.strip()


def processes(env: dict[str, str]) -> dict[str, list[str]]:
    """Name → command line of each process `make run` supervises, in start order."""
    python = sys.executable
    port = env["PORT"]
    procs = {}
    if not env.get("REDIS_URL"):
        procs["valkey"] = [python, "-m", "hermes_site.embedded_valkey"]
    # daphne with request bodies bounded per path before they are read (webserver.py).
    procs["web"] = [
        python,
        "-m",
        "hermes_site.webserver",
        "-b",
        "127.0.0.1",
        "-p",
        port,
        "hermes_site.asgi:application",
    ]
    workers = split_workers(env) if process_layout(env) == "split" else embedded_workers(env)
    procs.update(workers)
    if env.get("TELEGRAM_BOT_TOKEN"):
        # The Telegram bridge (long polling, or sending only in webhook mode).
        procs["telegram"] = [python, "manage.py", "run_telegram_bot"]
    return procs


LAYOUTS = ("embedded", "split")


def process_layout(env: dict[str, str]) -> str:
    """HERMES_PROCESS_LAYOUT: "embedded" (the default, two lean worker processes) or "split"
    (the earlier layout: three workers, the turn worker a prefork pool with a forked beat)."""
    layout = (env.get("HERMES_PROCESS_LAYOUT") or "embedded").strip().lower()
    if layout not in LAYOUTS:
        sys.exit(f"HERMES_PROCESS_LAYOUT must be one of {', '.join(LAYOUTS)}, not {layout!r}")
    return layout


def _celery_worker(*args: str) -> list[str]:
    return [
        str(BIN / "celery"),
        "-A",
        "hermes_site",
        "worker",
        *args,
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
    ]


def embedded_workers(env: dict[str, str]) -> dict[str, list[str]]:
    """The default layout, two worker processes (docs/RELIABILITY.md, "Process layout"):

    - "worker": turns in a pool of CELERY_CONCURRENCY threads (a turn waits on the model's
      stream, so threads carry it as well as processes, for one process's memory), with beat
      as a thread of the same process (--beat-thread, hermes_site/celery.py).
    - "background": the reviews', the schedules', the files' and the voice queues in a pool
      of five threads, a review (or the curator) holding at most one of them
      (learning.tasks), a file's processing at most one (attachments.tasks), a
      transcription at most one (voice.tasks, its engine in a child process) and a
      knowledge job at most one (knowledge.jobs), so a dispatcher
      pass always finds a free thread, and none ever takes a turn's slot.
    A crash of one is restarted by the supervisor without touching the other."""
    prefix = env.get("REDIS_KEY_PREFIX") or "hermes"
    return {
        "worker": _celery_worker(
            "--pool",
            "threads",
            "--concurrency",
            env.get("CELERY_CONCURRENCY", "2"),
            "--beat-thread",
        ),
        "background": _celery_worker(
            "-Q",
            f"{prefix}-reviews,{prefix}-schedules,{prefix}-files,{prefix}-voice",
            "-n",
            "background@%h",
            "--pool",
            "threads",
            "--concurrency",
            "5",
        ),
    }


def split_workers(env: dict[str, str]) -> dict[str, list[str]]:
    """HERMES_PROCESS_LAYOUT=split, the earlier layout (kept for comparison in
    bench/footprint_bench.py): three worker processes."""
    prefix = env.get("REDIS_KEY_PREFIX") or "hermes"
    return {
        # -B: beat forked from the worker runs the periodic turn sweep and sends the skills
        # curator to the reviews queue and the dispatcher to its own queue.
        "worker": _celery_worker("-B", "--concurrency", env.get("CELERY_CONCURRENCY", "2")),
        # Background reviews (one at a time), the files' processing and transcription share
        # this worker.
        "reviews": _celery_worker(
            "-Q",
            f"{prefix}-reviews,{prefix}-files,{prefix}-voice",
            "-n",
            "reviews@%h",
            "--concurrency",
            "1",
        ),
        # The schedules' dispatcher on its own queue and worker, one pass at a time (solo).
        "schedules": _celery_worker(
            "-Q", f"{prefix}-schedules", "-n", "schedules@%h", "--pool", "solo"
        ),
    }


# What each process prints once it started properly: an exit after it is a crash (restarted
# after 1 s), an exit before it a failure to start (restarted with a growing delay).
READY_LINES = {
    "web": r"Listening on TCP address",
    "worker": r" ready\.$",
    "background": r" ready\.$",
    "reviews": r" ready\.$",
    "schedules": r" ready\.$",
}


def _valkey_ready(env: dict[str, str]):
    def ready(program: Program) -> None:
        try:
            wait_until_ready(int(env.get("VALKEY_PORT", "6380")), program.process, timeout=30)
        except RuntimeError as exc:  # the supervisor restarts it; the clients retry meanwhile
            print(f"embedded Valkey is not ready: {exc}", file=sys.stderr, flush=True)

    return ready


def announce_when_listening(port: int, login: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                break
        except OSError:
            time.sleep(0.2)
    else:
        return
    print(f"\n  Hermes Hub is up: http://127.0.0.1:{port}/\n  {login}\n", flush=True)


def main() -> None:
    env = prepare_environment()
    os.chdir(BASE_DIR)
    manage(env, "migrate", "--noinput", "-v", "0")
    manage(env, "collectstatic", "--noinput", "-v", "0")
    login = manage(env, "ensure_admin")
    login += "\n  " + manage(env, "llm_status").replace("\n", "\n  ")
    programs = []
    for name, argv in processes(env).items():
        if name == "valkey":
            # Stopped last, so the others can still reach Redis while they stop.
            programs.append(Program(name, argv, ready=_valkey_ready(env), stop_last=True))
        else:
            programs.append(Program(name, argv, ready_line=READY_LINES.get(name)))
    threading.Thread(
        target=announce_when_listening, args=(int(env["PORT"]), login), daemon=True
    ).start()
    sys.exit(Supervisor(programs, env=env, cwd=str(BASE_DIR)).run())


if __name__ == "__main__":
    main()
