"""Errors in the shape each provider's SDK parses, so a client sees a provider error.

Anthropic: ``{"type": "error", "error": {"type": ..., "message": ...}}``; OpenAI:
``{"error": {"message": ..., "type": ..., "param": null, "code": ...}}``.
"""

from __future__ import annotations

from typing import Literal

from starlette.responses import JSONResponse

__all__ = ["Dialect", "error_response", "not_transformed"]

Dialect = Literal["anthropic", "openai"]
"""Which provider's error shape a route answers with."""

_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    404: "not_found_error",
    413: "request_too_large",
    415: "invalid_request_error",
    502: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
_OPENAI_TYPES = {
    400: "invalid_request_error",
    404: "invalid_request_error",
    413: "invalid_request_error",
    415: "invalid_request_error",
    502: "server_error",
    504: "timeout",
}


def not_transformed(exc: BaseException) -> str:
    """The message of a fail-closed refusal: the error's type only, never its text (which
    may quote the request)."""
    return (
        f"context management could not be applied ({type(exc).__name__}); the gateway "
        "fails closed, so the request was not forwarded"
    )


def error_response(dialect: Dialect, status: int, message: str) -> JSONResponse:
    """A JSON error response of ``status`` shaped for ``dialect``'s SDKs."""
    if dialect == "anthropic":
        kind = _ANTHROPIC_TYPES.get(status, "api_error")
        return JSONResponse(
            {"type": "error", "error": {"type": kind, "message": message}}, status_code=status
        )
    kind = _OPENAI_TYPES.get(status, "server_error")
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": None, "code": kind}},
        status_code=status,
    )
