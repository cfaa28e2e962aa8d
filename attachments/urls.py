from django.urls import path

from attachments import views

urlpatterns = [
    path(
        "attachments/<int:attachment_id>/download",
        views.attachment_download,
        name="attachment_download",
    ),
]
