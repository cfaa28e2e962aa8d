from django.urls import path

from chats import views

urlpatterns = [
    path("", views.chat_list, name="chat_list"),
]
