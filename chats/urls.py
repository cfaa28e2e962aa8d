from django.urls import path

from chats import views, views_context, views_search

# Chat keys may contain `/`, hence `path:`. Only the chat page ends with a slash, so a key
# can never be mistaken for one of the chat's endpoints.
urlpatterns = [
    path("", views.chat_list, name="chat_list"),
    path("rooms/", views.room_create, name="room_create"),
    path("notices/<int:notice_id>/dismiss", views.notice_dismiss, name="person_notice_dismiss"),
    path("search", views_search.search_page, name="search"),
    path("status", views_context.status_page, name="status"),
    path(
        "chats/<path:chat_key>/messages/<int:message_id>/context",
        views_context.message_context,
        name="message_context",
    ),
    path(
        "chats/<path:chat_key>/messages/<int:message_id>",
        views.chat_message,
        name="chat_message",
    ),
    path("chats/<path:chat_key>/messages", views.message_post, name="chat_message_post"),
    path(
        "chats/<path:chat_key>/members/<int:person_id>/remove",
        views.member_remove,
        name="chat_member_remove",
    ),
    path("chats/<path:chat_key>/members", views.member_add, name="chat_member_add"),
    path("chats/<path:chat_key>/turns/<int:turn_id>/stop", views.turn_stop_view, name="turn_stop"),
    path("chats/<path:chat_key>/stop", views.chat_stop_view, name="chat_stop"),
    path("chats/<path:chat_key>/", views.chat_page, name="chat_page"),
]
