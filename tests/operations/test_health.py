"""/healthz and /readyz: answered to a probe by IP address over plain HTTP even with HTTPS
on; readiness names the part that fails (Redis, the workers, the scheduler) and recovers."""

from datetime import timedelta
from types import SimpleNamespace

import pytest
from django.test import Client
from django.utils import timezone

from operations import worker
from operations.models import Heartbeat
from operations.services import heartbeat_beat
from schedules.dispatch import heartbeat_write
from schedules.selectors import scheduler_status
from tests.operations.helpers import TOKEN, scrape

pytestmark = pytest.mark.django_db

PROBE_HOST = "10.0.0.7"  # a load balancer's probe names the host by its address


@pytest.fixture
def https_on(settings):
    """A deployment's settings: HTTPS redirect and HSTS on, only the public name allowed."""
    settings.ALLOWED_HOSTS = ["hub.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    settings.SECURE_HSTS_SECONDS = 31_536_000
    settings.SESSION_COOKIE_SECURE = True


def alive_everywhere():
    heartbeat_beat(name=worker.WORKER, host="celery@box")
    heartbeat_write(timezone.now())


def ready(client=None, **extra):
    response = (client or Client()).get("/readyz", **extra)
    return response.status_code, response.json()


def test_liveness_answers_a_probe_by_address_with_https_on(https_on):
    response = Client().get("/healthz", HTTP_HOST=PROBE_HOST)
    assert response.status_code == 200 and response.content == b"ok\n"
    # The same request to a page is refused (host) or redirected (plain HTTP): the settings
    # are in force, the probes are exempt from them.
    assert Client().get("/accounts/login/", HTTP_HOST=PROBE_HOST).status_code == 400
    redirected = Client().get("/accounts/login/", HTTP_HOST="hub.example.com")
    assert redirected.status_code == 301 and redirected["Location"].startswith("https://")


def test_readiness_and_the_scrape_answer_by_address_with_https_on(https_on, settings):
    settings.METRICS_TOKEN = TOKEN
    alive_everywhere()
    code, body = ready(HTTP_HOST=PROBE_HOST)
    assert code == 200 and body["status"] == "ok" and body["failing"] == []
    assert scrape(Client(), HTTP_HOST=PROBE_HOST)
    assert Client().get("/metrics", HTTP_HOST=PROBE_HOST).status_code == 401


def test_readiness_fails_while_redis_is_down_and_recovers(settings):
    alive_everywhere()
    assert ready()[0] == 200
    real = settings.REDIS_URL
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nobody listens on port 1
    code, body = ready()
    assert code == 503 and body["failing"] == ["redis"]
    assert body["checks"]["redis"] == "unreachable"  # no address or error text to anybody
    assert body["checks"]["database"] == "ok"
    settings.REDIS_URL = real
    assert ready()[0] == 200


def test_readiness_names_workers_that_stopped_beating():
    heartbeat_write(timezone.now())
    code, body = ready()
    assert code == 503 and body["failing"] == ["workers"]
    old = timezone.now() - timedelta(minutes=5)
    heartbeat_beat(name=worker.WORKER, host="celery@gone", now=old)
    assert ready()[1]["failing"] == ["workers"]  # a silent worker is no worker
    heartbeat_beat(name=worker.WORKER, host="celery@box")
    code, body = ready()
    assert code == 200 and body["checks"]["workers"] == "1 alive"


def test_readiness_names_a_scheduler_that_stopped():
    heartbeat_beat(name=worker.WORKER, host="celery@box")
    heartbeat_write(timezone.now() - timedelta(hours=1))
    code, body = ready()
    assert code == 503 and body["failing"] == ["scheduler"]
    assert "no scheduler has run" in body["checks"]["scheduler"]


def test_the_dispatcher_and_the_workers_share_one_heartbeat():
    """The schedules' dispatcher writes the same kind of heartbeat the workers do."""
    now = timezone.now()
    heartbeat_write(now)
    heartbeat_write(now + timedelta(seconds=5))  # updated in place, never a second row
    assert list(Heartbeat.objects.values_list("name", "beat_at")) == [
        ("dispatcher", now + timedelta(seconds=5))
    ]
    assert scheduler_status(now=now + timedelta(seconds=10)).alive


@pytest.mark.django_db(transaction=True)
def test_a_worker_beats_from_ready_until_it_shuts_down(settings):
    settings.WORKER_HEARTBEAT_SECONDS = 1
    node = SimpleNamespace(hostname="celery@test-node")
    thread = worker.on_worker_ready(sender=node)
    try:
        deadline = timezone.now() + timedelta(seconds=30)
        while not Heartbeat.objects.filter(name="worker", host="celery@test-node").exists():
            assert timezone.now() < deadline, "the worker never beat"
            thread.stopped.wait(0.05)
    finally:
        worker.on_worker_shutdown(sender=node)
    assert not thread.is_alive()
    assert not Heartbeat.objects.filter(name="worker").exists()


def test_probes_take_only_get(settings):
    assert Client().post("/healthz").status_code == 405
    assert Client().post("/readyz").status_code == 405
