from django.urls import path

from bots import views

urlpatterns = [
    path("webhook", views.telegram_webhook, name="telegram_webhook"),
    path("", views.telegram_page, name="telegram_page"),
    path("link-code", views.link_code_view, name="telegram_link_code"),
    path(
        "pairings/<int:request_id>/<str:decision>",
        views.pairing_decide_view,
        name="telegram_pairing_decide",
    ),
]
