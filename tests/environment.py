"""A pytest plugin (pyproject's addopts) that prepares the environment before pytest-django
loads the settings, which conftest.py is too late for.

This run's Prometheus counters (prometheus_client's multiprocess mode) go to a directory of
its own, which the workers and servers the tests start inherit: never var/prometheus, which
a `make run` of the same checkout uses, and never another run's. Removed at the end."""

import os
import shutil
import tempfile

_created = None
if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
    _created = tempfile.mkdtemp(prefix="hermes-metrics-")
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = _created


def pytest_unconfigure(config):
    if _created:
        shutil.rmtree(_created, ignore_errors=True)
