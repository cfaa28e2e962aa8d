"""One migration per parallel test run: the first xdist worker migrates its test database and
leaves a migrated copy (the template); every other worker clones that copy instead of running
the ~25 apps' migrations again (under 4 workers on 2 cores each migration took minutes).

- SQLite: the template is a file next to the test databases; after a WAL checkpoint the
  migrated file is copied to the template and from it to each worker's own file.
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
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        partial = _sqlite_path(name).with_suffix(".partial")
        shutil.copyfile(connection.settings_dict["NAME"], partial)
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


def controller_cleanup(config) -> None:
    """At the end of a parallel run, in the controller: remove the template and its files."""
    if hasattr(config, "workerinput"):
        return
    name = os.environ.get(ENV_KEY)
    if not name or name != f"hermes_test_template_{os.getpid()}":
        return
    if template_ready(name) and connection.vendor != "sqlite":
        from pytest_django.plugin import blocking_manager_key

        with config.stash[blocking_manager_key].unblock(), connection._nodb_cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}"')
    for path in (_sqlite_path(name), _ready_path(name), _lock_path(name)):
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
