"""Routes of the OpenAI-compatible endpoints, mounted at /v1/ (docs/OPENAI.md)."""

from django.urls import path, re_path

from openai_api import views

urlpatterns = [
    path("models", views.models, name="openai_models"),
    # Last: anything else under /v1/ is a JSON 404 in OpenAI's shape.
    re_path(r"", views.unknown_path),
]
