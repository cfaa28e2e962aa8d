"""WebSocket routes of the chats app."""

from django.urls import path

from chats.consumers import ChatConsumer

websocket_urlpatterns = [
    # `path:` because ids may contain `/`; `:` and `%` arrive percent-decoded by the server.
    path("ws/chats/<path:chat_key>/", ChatConsumer.as_asgi(), name="ws_chat"),
]
