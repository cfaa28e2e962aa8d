"""The API v1 routes of attachments, mounted at /api/v1/ before the API's own (whose last
route answers every unknown path with a JSON 404)."""

from django.urls import path

from attachments import views

urlpatterns = [
    path(
        "attachments/<int:attachment_id>",
        views.api_attachment_download,
        name="api_attachment_download",
    ),
    path("uploads/messages", views.api_message_upload, name="api_message_upload"),
]
