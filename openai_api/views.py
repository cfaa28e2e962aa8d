"""The OpenAI-compatible endpoints under /v1/ (docs/OPENAI.md): parse, call one service,
answer in OpenAI's wire format, errors included."""

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from openai_api.auth import personal_key_person
from openai_api.errors import OpenAIError, openai_error_response
from openai_api.render import MODEL_ID, models_json


def _method_not_allowed(request: HttpRequest, allow: str) -> JsonResponse:
    error = OpenAIError(
        405, f"Method {request.method} is not allowed here; use {allow}.", headers={"Allow": allow}
    )
    return openai_error_response(error)


@csrf_exempt
def models(request: HttpRequest) -> JsonResponse:
    """Lists the one model this hub serves: its agent."""
    if request.method != "GET":
        return _method_not_allowed(request, "GET")
    try:
        personal_key_person(request)
    except OpenAIError as error:
        return openai_error_response(error)
    return JsonResponse(models_json())


@csrf_exempt
def model_detail(request: HttpRequest, model_id: str) -> JsonResponse:
    """The one model, by its id; any other id is a 404 `model_not_found`."""
    if request.method != "GET":
        return _method_not_allowed(request, "GET")
    try:
        personal_key_person(request)
        if model_id != MODEL_ID:
            raise OpenAIError(
                404,
                f"The model {model_id!r} does not exist.",
                param="model",
                code="model_not_found",
            )
    except OpenAIError as error:
        return openai_error_response(error)
    return JsonResponse(models_json()["data"][0])


@csrf_exempt
def unknown_path(request: HttpRequest, *args, **kwargs) -> JsonResponse:
    """Anything else under /v1/ is a JSON 404 in OpenAI's shape, never an HTML page."""
    error = OpenAIError(404, f"No endpoint {request.path}; see docs/OPENAI.md.", code="not_found")
    return openai_error_response(error)
