"""ASGI entry point: HTTP (pages, API) and WebSockets, served by daphne."""

import os

import django
from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hermes_site.settings")
django.setup(set_prefix=False)

from operations.tracing import tracing_configure  # noqa: E402

# A no-op unless TRACES_ENABLED (docs/OPERATIONS.md#traces). Before the middleware chain is
# built: the request tracing middleware leaves the chain when no provider is installed.
tracing_configure(process="web")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddleware  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from channels.sessions import CookieMiddleware, SessionMiddleware  # noqa: E402

from chats.routing import websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            CookieMiddleware(SessionMiddleware(AuthMiddleware(URLRouter(websocket_urlpatterns))))
        ),
    }
)
