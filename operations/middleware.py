"""Answers the probes and the scrape before any other middleware.

Load balancers and Prometheus reach each host by its address over plain HTTP: with HTTPS on,
SecurityMiddleware would redirect them and CommonMiddleware would refuse their Host header
(not in ALLOWED_HOSTS). These three paths read no session, set no cookie and never build
an absolute URL from the Host header, so they are safe to answer here."""

from collections.abc import Callable

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotFound

from operations import views

PROBES: dict[str, Callable[[HttpRequest], HttpResponse]] = {
    "/healthz": views.healthz,
    "/readyz": views.readyz,
    "/metrics": views.metrics,
}


class ProbeMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        view = PROBES.get(request.path_info)
        if view is None:
            return self.get_response(request)
        try:
            return view(request)
        except Http404:
            return HttpResponseNotFound("Not found.\n", content_type="text/plain")
