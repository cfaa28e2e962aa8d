"""Routes of the HTTP API v1, mounted at /api/v1/ (paths have no trailing slash).

A chat key contains `:` and may contain `%` escapes and `/`, so it is captured with the
`path` converter; clients percent-encode it (`api:a%3Ab` is sent as `api:a%253Ab`).
"""

from django.urls import path, re_path

from chats.api import views
from chats.api.streams import turn_events

urlpatterns = [
    path("messages", views.message_post, name="api_message_post"),
    path("chats", views.chat_list, name="api_chat_list"),
    path("chats/<path:chat_key>/messages", views.chat_messages, name="api_chat_messages"),
    path("chats/<path:chat_key>/stop", views.chat_stop, name="api_chat_stop"),
    path("search", views.search, name="api_search"),
    path("turns/<int:turn_id>", views.turn_detail, name="api_turn_detail"),
    path("turns/<int:turn_id>/events", turn_events, name="api_turn_events"),
    # Last: anything else under /api/v1/ is a JSON 404, never an HTML page or a redirect.
    re_path(r"", views.unknown_path),
]
