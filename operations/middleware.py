"""Answers the probes and the scrape before any other middleware; then the request's trace
span (`RequestTracingMiddleware`).

Load balancers and Prometheus reach each host by its address over plain HTTP: with HTTPS on,
SecurityMiddleware would redirect them and CommonMiddleware would refuse their Host header
(not in ALLOWED_HOSTS). These three paths read no session, set no cookie and never build
an absolute URL from the Host header, so they are safe to answer here."""

from collections.abc import Callable

from asgiref.sync import iscoroutinefunction, markcoroutinefunction
from django.core.exceptions import MiddlewareNotUsed
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotFound
from opentelemetry import propagate, trace
from opentelemetry.trace import SpanKind, StatusCode

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


# Methods recorded as they are; any other (a client may send anything) is "_OTHER", as the
# HTTP semantic conventions say, so span names stay a small set.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
_tracer = trace.get_tracer("hermes.web")


class RequestTracingMiddleware:
    """One server span per HTTP request (OpenTelemetry API: a no-op while traces are off):
    the method, the route pattern (`/api/v1/chats/<int:chat_id>`, never the path, which may
    hold a token such as a password-reset link's) and the response status. Never the query
    string, headers, cookies or body. A `traceparent` header the client sent is honoured
    (W3C trace context; OTEL_PROPAGATORS). Probes are answered before it: not traced.
    A streamed response's span ends when streaming starts. Not used at all while no tracer
    provider is installed (traces off)."""

    sync_capable = True
    async_capable = True

    def __init__(self, get_response):
        if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
            # Traces are off (no provider was installed before the middleware chain was
            # built): leave the chain, costing nothing per request.
            raise MiddlewareNotUsed("traces are off")
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: HttpRequest):
        if self.is_async:
            return self._acall(request)
        method = _method(request)
        with _span(request, method) as span:
            response = self.get_response(request)
            _finish(span, method, request, response)
        return response

    async def _acall(self, request: HttpRequest):
        method = _method(request)
        with _span(request, method) as span:
            response = await self.get_response(request)
            _finish(span, method, request, response)
        return response


def _method(request: HttpRequest) -> str:
    return request.method if request.method in KNOWN_METHODS else "_OTHER"


def _span(request: HttpRequest, method: str):
    return _tracer.start_as_current_span(
        method,
        context=propagate.extract(request.headers),
        kind=SpanKind.SERVER,
        attributes={"http.request.method": method, "url.scheme": request.scheme},
        # An exception's message may quote anything (a body, a token): never recorded.
        record_exception=False,
        set_status_on_exception=False,
    )


def _finish(span, method: str, request: HttpRequest, response: HttpResponse) -> None:
    if not span.is_recording():
        return
    match = getattr(request, "resolver_match", None)
    route = getattr(match, "route", None)
    if route is not None:
        route = "/" + route.lstrip("^").rstrip("$")
        span.set_attribute("http.route", route)
        span.update_name(f"{method} {route}")
    span.set_attribute("http.response.status_code", response.status_code)
    if response.status_code >= 500:
        span.set_attribute("error.type", str(response.status_code))
        span.set_status(StatusCode.ERROR)
