from django.urls import path

from openai_api import views_keys

urlpatterns = [
    path("keys/", views_keys.keys_page, name="personal_keys"),
    path("keys/<int:key_id>/revoke", views_keys.key_revoke, name="personal_key_revoke"),
]
