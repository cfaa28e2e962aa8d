"""Routes of the OpenAI-compatible endpoints, mounted at /v1/ (docs/OPENAI.md)."""

from django.urls import path, re_path

from openai_api import views
from openai_api.completions import chat_completions
from openai_api.responses import responses

urlpatterns = [
    path("models", views.models, name="openai_models"),
    path("models/<str:model_id>", views.model_detail, name="openai_model_detail"),
    path("chat/completions", chat_completions, name="openai_chat_completions"),
    path("responses", responses, name="openai_responses"),
    # Last: anything else under /v1/ is a JSON 404 in OpenAI's shape.
    re_path(r"", views.unknown_path),
]
