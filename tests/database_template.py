"""One migration per parallel test run: the first xdist worker migrates its test database and
leaves a migrated copy (the template); every other worker clones that copy instead of running
the ~25 apps' migrations again (under 4 workers on 2 cores each migration took minutes).

- SQLite: the template is a file next to the test databases, written from the migrated
  database by SQLite's backup API, and copied from it to each worker's own file.
- PostgreSQL: `CREATE DATABASE <worker's> TEMPLATE <template>`.

The workers take turns under a file lock, so the template is made once and is never read
while being written. The controller (the process that started the workers) names the template
after its pid, passes the name to the workers in the environment and removes the template
when the run ends. A serial run (no workers) migrates as before.

Each worker's database keeps its own NAME (settings' TEST NAME, per pid), which the
live-process tests hand to their subprocesses (tests/live.py).
"""

import contextlib
import fcntl
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

from django.db import connection

ENV_KEY = "HERMES_TEST_DB_TEMPLATE"


def controller_configure(config) -> None:
    """In the controller of a parallel run: name this run's template for its workers."""
    if hasattr(config, "workerinput"):
        return
    os.environ[ENV_KEY] = f"hermes_test_template_{os.getpid()}"


def template_name() -> str | None:
    """This run's template name in a parallel worker; None when running serially."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return None
    return os.environ.get(ENV_KEY) or None


def _sqlite_path(name: str) -> Path:
    return Path(tempfile.gettempdir()) / f"{name}.db"


def _lock_path(name: str) -> Path:
    return Path(tempfile.gettempdir()) / f"{name}.lock"


def _ready_path(name: str) -> Path:
    return Path(tempfile.gettempdir()) / f"{name}.ready"


@contextlib.contextmanager
def template_lock(name: str):
    with open(_lock_path(name), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def template_ready(name: str) -> bool:
    return _ready_path(name).exists()


def _test_database_name() -> str:
    return connection.settings_dict["TEST"]["NAME"]


def template_save(name: str) -> None:
    """Keep this worker's freshly migrated database as the run's template."""
    if connection.vendor == "sqlite":
        # Through SQLite's backup API, never by copying the file: opening and closing the
        # database file outside SQLite drops this process's POSIX locks on it, which SQLite
        # relies on. A daphne started next then took itself for the only connection, and on
        # closing deleted the WAL this worker still wrote to: its rows were invisible to the
        # live processes (logins failed) and later connections hit "disk I/O error".
        partial = _sqlite_path(name).with_suffix(".partial")
        partial.unlink(missing_ok=True)
        connection.ensure_connection()
        with contextlib.closing(sqlite3.connect(partial)) as copy:
            connection.connection.backup(copy)
        os.replace(partial, _sqlite_path(name))
    else:
        own = connection.settings_dict["NAME"]
        connection.close()  # a template database must have no other session
        with connection._nodb_cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
            cursor.execute(f'CREATE DATABASE "{name}" TEMPLATE "{own}"')
    _ready_path(name).touch()


def template_clone(name: str) -> None:
    """Give this worker a copy of the template under its own test database's name."""
    target = _test_database_name()
    if connection.vendor == "sqlite":
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(target + suffix)
        shutil.copyfile(_sqlite_path(name), target)
    else:
        with connection._nodb_cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{target}"')
            cursor.execute(f'CREATE DATABASE "{target}" TEMPLATE "{name}"')


def _migrated_sqlite_name() -> str:
    # The controller's name (a serial run's own process is its controller too).
    return (os.environ.get(ENV_KEY) or f"hermes_test_template_{os.getpid()}") + "_sqlite"


def migrated_sqlite_copy(target: Path) -> Path:
    """A freshly migrated SQLite database at `target`, as `make run`'s first start leaves it
    (every migration applied, no rows of the tests): the tests that start `make run` for
    something other than its first migration (the process layout, restarts) begin from this
    instead of migrating ~25 apps each. Made once per run, by whichever process asks first,
    with `manage.py migrate` against a file of its own; `tests/test_runner.py` still starts
    one `make run` on an empty var/ directory."""
    name = _migrated_sqlite_name()
    made = _sqlite_path(name)
    with template_lock(name):
        if not _ready_path(name).exists():
            env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
            env.update(
                DATABASE_URL=f"sqlite:///{made}",
                HERMES_VAR_DIR=str(made.with_suffix(".var")),
                SECRET_KEY=env.get("SECRET_KEY") or "test-only-secret-key",
            )
            for stale in (made, made.with_name(made.name + "-wal")):
                stale.unlink(missing_ok=True)
            done = subprocess.run(
                [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
                cwd=Path(__file__).resolve().parent.parent,
                env=env,
                capture_output=True,
                text=True,
                timeout=600,
            )
            if done.returncode != 0:
                raise RuntimeError(f"migrating {made} failed:\n{done.stderr[-3000:]}")
            with contextlib.closing(sqlite3.connect(made)) as db:
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            shutil.rmtree(made.with_suffix(".var"), ignore_errors=True)
            _ready_path(name).touch()
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(made, target)
    return target


def cheaper_postgresql_flush() -> None:
    """Empty PostgreSQL's tables after a transactional test with DELETE, not TRUNCATE.

    pytest-django empties every table after each `transactional_db` test (Django's `flush`).
    On PostgreSQL that is one `TRUNCATE` of ~150 tables, which gives every table and index a
    new file: 2 to 3 s a test on this machine, against milliseconds for deleting the few
    rows a test leaves. The rows go all the same (Django's foreign keys are DEFERRABLE
    INITIALLY DEFERRED, checked when the flush's transaction commits; no PostgreSQL trigger
    of this project fires on DELETE); a flush that resets sequences or cascades still
    truncates."""
    from django.db.backends.postgresql.operations import DatabaseOperations

    truncate = DatabaseOperations.sql_flush

    def sql_flush(self, style, tables, *, reset_sequences=False, allow_cascade=False):
        if reset_sequences or allow_cascade or not tables:
            return truncate(
                self, style, tables, reset_sequences=reset_sequences, allow_cascade=allow_cascade
            )
        return ["SET CONSTRAINTS ALL DEFERRED;"] + [
            f"{style.SQL_KEYWORD('DELETE FROM')} {style.SQL_FIELD(self.quote_name(table))};"
            for table in tables
        ]

    DatabaseOperations.sql_flush = sql_flush


def controller_cleanup(config) -> None:
    """At the end of a parallel run, in the controller: remove the template and its files."""
    if hasattr(config, "workerinput"):
        return
    name = os.environ.get(ENV_KEY)
    if not name or name != f"hermes_test_template_{os.getpid()}":
        return
    migrated = _migrated_sqlite_name()
    for path in (_sqlite_path(migrated), _ready_path(migrated), _lock_path(migrated)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    if template_ready(name) and connection.vendor != "sqlite":
        from pytest_django.plugin import blocking_manager_key

        with config.stash[blocking_manager_key].unblock(), connection._nodb_cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
    for path in (_sqlite_path(name), _ready_path(name), _lock_path(name)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
