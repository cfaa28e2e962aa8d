"""The dashboard WebSocket as it answered pings before issue #11, for bench/ping_bench.py's
before/after comparison in one run (daphne serves `bench.ping_legacy:application`).

Before: every `ping` re-read the whole replay buffer (up to 2,000 events) and decoded each
one, and a socket could send frames as fast as it liked. Everything else is today's code.
"""

import contextlib
import json
import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hermes_site.settings")

from django.core.asgi import get_asgi_application  # noqa: E402

django_asgi_app = get_asgi_application()

from asgiref.sync import sync_to_async  # noqa: E402
from channels.auth import AuthMiddleware  # noqa: E402
from channels.generic.websocket import AsyncJsonWebsocketConsumer  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from channels.sessions import CookieMiddleware, SessionMiddleware  # noqa: E402
from django.urls import path  # noqa: E402

from chats.agent import events  # noqa: E402
from chats.consumers import ChatConsumer, _last_seq  # noqa: E402
from hermes_site.redis import guarded  # noqa: E402


def legacy_events_since(chat_id: int, after_seq: int) -> list[dict]:
    """The old read: the whole buffer, every event decoded, then filtered."""
    raw = guarded(lambda r: r.lrange(events._replay_key(chat_id), 0, -1), default=[], what="replay")
    decoded = [json.loads(item) for item in raw]
    return sorted((e for e in decoded if e["seq"] > after_seq), key=lambda e: e["seq"])


_legacy_events_since = sync_to_async(legacy_events_since, thread_sensitive=False)


class LegacyChatConsumer(ChatConsumer):
    async def receive(self, text_data=None, bytes_data=None, **kwargs):  # no frame allowance
        with contextlib.suppress(ValueError):  # not JSON: ignored, as today
            await AsyncJsonWebsocketConsumer.receive(
                self, text_data=text_data, bytes_data=bytes_data, **kwargs
            )

    async def _pong(self):
        newest = await _last_seq(self.chat_id)
        for event in await _legacy_events_since(self.chat_id, self.last_sent):
            await self._send_in_order(event)
        await self.send_json({"type": "pong", "last_seq": max(newest, self.last_sent)})


application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(
            CookieMiddleware(
                SessionMiddleware(
                    AuthMiddleware(
                        URLRouter([path("ws/chats/<path:chat_key>/", LegacyChatConsumer.as_asgi())])
                    )
                )
            )
        ),
    }
)
