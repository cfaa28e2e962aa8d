"""The one error shape of the API: `{"error": {"code": "<snake_case>", "message": "..."}}`.

Views and helpers raise `ApiError`; `chats.api.endpoint.api_endpoint` turns it into a JSON
response with the right status and headers. Codes are part of the contract (docs/API.md).
"""

from django.http import JsonResponse


class ApiError(Exception):
    """An answer other than success: HTTP status, stable code, human sentence, extra headers."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.headers = headers or {}


def error_response(error: ApiError) -> JsonResponse:
    body = {"code": error.code, "message": error.message}
    if error.field is not None:
        body["field"] = error.field
    response = JsonResponse({"error": body}, status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    return response


def bad_request(code: str, message: str, *, field: str | None = None) -> ApiError:
    return ApiError(400, code, message, field=field)


def invalid_field(field: str, message: str) -> ApiError:
    """A field with a wrong type or value; the message always names the field."""
    if field not in message:
        message = f"{field}: {message}"
    return ApiError(400, "invalid_field", message, field=field)


def not_found(message: str = "Not found.") -> ApiError:
    return ApiError(404, "not_found", message)
