from django.urls import path

from toolservers import views

# Mounted before chats.urls: the chat page's pattern only matches keys ending in `/`, and no
# chats endpoint ends in `/tools`, `/tools/set` or `/tools/roles`, so these never shadow a chat.
urlpatterns = [
    path("tools/", views.tools_page, name="tools_page"),
    path("tools/add/<str:transport>", views.server_add_page, name="tools_server_add"),
    path("tools/<slug:slug>/enabled", views.server_enabled, name="tools_server_enabled"),
    path("tools/<slug:slug>/default", views.server_default, name="tools_server_default"),
    path("tools/<slug:slug>/edit", views.server_edit, name="tools_server_edit"),
    path("tools/<slug:slug>/tools/<path:name>/accept", views.tool_accept, name="tools_accept"),
    path("chats/<path:chat_key>/tools", views.chat_tools_page, name="chat_tools"),
    path("chats/<path:chat_key>/tools/set", views.chat_tools_set, name="chat_tools_set"),
    path("chats/<path:chat_key>/tools/roles", views.chat_role_set, name="chat_role_set"),
]
