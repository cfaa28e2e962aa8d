from django.urls import path

from learning import views

# Mounted before chats.urls. The chat page's pattern only matches keys ending in `/`, and no
# chats endpoint ends in `/learning` or `/learning/settings`, so these never shadow a chat.
urlpatterns = [
    path("chats/<path:chat_key>/learning", views.chat_learning_page, name="chat_learning"),
    path(
        "chats/<path:chat_key>/learning/settings",
        views.chat_learning_settings,
        name="chat_learning_settings",
    ),
]
