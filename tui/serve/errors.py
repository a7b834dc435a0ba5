"""The OpenAI-style error: :class:`ApiError` (a status and the ``{"error": {...}}`` body), and the
JSON body decoder that turns every malformed body into one."""

from __future__ import annotations

from typing import Any

MAX_MESSAGE_CHARS = 500  # an error message's length, however long the value it quotes


class ApiError(Exception):
    """An error the client caused (or must be told about), with its HTTP status and OpenAI body."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        if len(message) > MAX_MESSAGE_CHARS:  # a message may quote what was sent: never all of it
            message = message[: MAX_MESSAGE_CHARS - 3] + "..."
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        return error_body(self.message, self.type, self.param, self.code)


def error_body(message: str, type: str, param: str | None = None, code: str | None = None) -> dict[str, Any]:
    """The OpenAI error shape: ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def bad(message: str, param: str | None = None) -> ApiError:
    """A 400 about ``param``."""
    return ApiError(400, message, param=param)


def type_name(value: Any) -> str:
    """A JSON value's type as an error message names it."""
    return "null" if value is None else type(value).__name__
