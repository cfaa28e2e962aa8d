from django.urls import path

from attachments import views, web

urlpatterns = [
    path(
        "attachments/<int:attachment_id>/download",
        views.attachment_download,
        name="attachment_download",
    ),
    path(
        "attachments/<int:attachment_id>/thumbnail",
        views.attachment_thumbnail_view,
        name="attachment_thumbnail",
    ),
    path("attachments/<int:attachment_id>/view", views.attachment_view, name="attachment_view"),
    path(
        "attachments/<int:attachment_id>/listen",
        views.attachment_listen,
        name="attachment_listen",
    ),
    path("attachments/chats/<path:chat_key>/messages", web.message_upload, name="attachments_post"),
]
