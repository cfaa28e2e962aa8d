"""WebSocket routes of the chats app (the dashboard's live updates arrive with the dashboard)."""

websocket_urlpatterns: list = []
