"""Liveness, readiness and the Prometheus endpoint. They are answered by
`operations.middleware.ProbeMiddleware` ahead of the HTTPS redirect and the host check,
so a probe over plain HTTP by IP address reaches them (docs/OPERATIONS.md)."""

from django.conf import settings
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from operations.figures import HubCollector
from operations.metrics import render
from operations.readiness import readiness_checks
from operations.selectors import metrics_scrape_allowed

NO_STORE = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def _method_allowed(request: HttpRequest) -> HttpResponse | None:
    if request.method in ("GET", "HEAD"):
        return None
    return HttpResponse("Use GET.\n", status=405, headers={"Allow": "GET, HEAD", **NO_STORE})


def healthz(request: HttpRequest) -> HttpResponse:
    """Liveness: the process answers requests. Checks nothing else on purpose."""
    return _method_allowed(request) or HttpResponse(
        "ok\n", content_type="text/plain", headers=NO_STORE
    )


def readyz(request: HttpRequest) -> HttpResponse:
    """Readiness: 200 when every part is ready, else 503 naming the failing parts."""
    refused = _method_allowed(request)
    if refused:
        return refused
    checks = readiness_checks()
    failing = [check.part for check in checks if not check.ok]
    body = {
        "status": "failing" if failing else "ok",
        "failing": failing,
        "checks": {check.part: check.detail for check in checks},
    }
    return JsonResponse(body, status=503 if failing else 200, headers=NO_STORE)


def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus metrics of this host's processes and of the whole hub; 404 while
    METRICS_TOKEN is unset, 401 without it as a bearer token."""
    if not settings.METRICS_TOKEN:
        raise Http404("Metrics are off (METRICS_TOKEN is not set).")
    refused = _method_allowed(request)
    if refused:
        return refused
    if not metrics_scrape_allowed(authorization=request.headers.get("Authorization", "")):
        return HttpResponse(
            "A bearer token (METRICS_TOKEN) is required.\n",
            status=401,
            content_type="text/plain",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"', **NO_STORE},
        )
    return HttpResponse(render(HubCollector()), content_type=CONTENT_TYPE_LATEST, headers=NO_STORE)
