"""OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`.

Clients (the `openai` SDK among them) read `type` and `code`; the SDK maps the status to its
exception classes (401 AuthenticationError, 403 PermissionDeniedError, 404 NotFoundError,
400 BadRequestError, 429 RateLimitError).
"""

from django.http import JsonResponse

from chats.api.errors import ApiError

TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_error",
    500: "server_error",
}
# API v1 codes that OpenAI spells otherwise.
CODES = {"invalid_token": "invalid_api_key", "missing_token": "invalid_api_key"}


class OpenAIError(Exception):
    """A failure in OpenAI's shape: HTTP status, message, and optional param and code."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        headers: dict[str, str] | None = None,
    ):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param
        self.headers = headers or {}

    @classmethod
    def from_api_error(cls, error: ApiError) -> "OpenAIError":
        code = CODES.get(error.code, error.code)
        return cls(error.status, error.message, code=code, headers=error.headers)

    def body(self) -> dict:
        return {
            "error": {
                "message": self.message,
                "type": TYPES.get(self.status, "invalid_request_error"),
                "param": self.param,
                "code": self.code,
            }
        }


def openai_error_response(error: OpenAIError) -> JsonResponse:
    response = JsonResponse(error.body(), status=error.status)
    for name, value in error.headers.items():
        response[name] = value
    return response


def bad_request(message: str, *, param: str | None = None, code: str | None = None) -> OpenAIError:
    return OpenAIError(400, message, param=param, code=code)
