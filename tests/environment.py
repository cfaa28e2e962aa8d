"""A pytest plugin (pyproject's addopts) that prepares the environment before pytest-django
loads the settings, which conftest.py is too late for.

This run's Prometheus counters (prometheus_client's multiprocess mode) go to a directory of
its own, which the workers and servers the tests start inherit: never var/prometheus, which
a `make run` of the same checkout uses, and never another run's. Under pytest-xdist each
test worker gets a directory of its own too (the controller's is inherited by the workers
it starts): a test that reads /metrics sees only the counters of its own worker's processes,
as it would in a serial run. Removed at the end."""

import os
import shutil
import tempfile

# Set by the first process of this run that made a directory: the xdist controller, or the
# only process of a serial run. A directory named by the person running the tests is theirs.
_OWNED = "HERMES_TEST_METRICS_DIR_OWNED"

_created = None
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR") or (
    os.environ.get(_OWNED) and os.environ.get("PYTEST_XDIST_WORKER")
):
    _created = tempfile.mkdtemp(prefix="hermes-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _created
    os.environ[_OWNED] = "1"


def pytest_unconfigure(config):
    if _created:
        shutil.rmtree(_created, ignore_errors=True)
