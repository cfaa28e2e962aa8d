from django.urls import path

from schedules import views

# Mounted before chats.urls: the chat page's pattern only matches keys ending in `/`, and no
# chats endpoint ends in `/schedules`, so the panel never shadows a chat.
urlpatterns = [
    path("chats/<path:chat_key>/schedules", views.chat_schedules, name="chat_schedules"),
    path("schedules/", views.my_schedules, name="my_schedules"),
    path("schedules/preview", views.preview, name="schedule_preview"),
    path("schedules/<int:schedule_id>/edit", views.schedule_edit, name="schedule_edit"),
    path("schedules/<int:schedule_id>/<str:action>", views.schedule_action, name="schedule_action"),
    path("settings/time-zone/", views.timezone_settings, name="timezone_settings"),
]
