"""The exceptions contextfold raises.

Provider SDK errors are converted at the adapter boundary, so callers only ever
need to catch these::

    ContextfoldError
    ├── MessageFormatError (ValueError)    malformed provider message or tool-call JSON
    ├── MissingDependencyError (ImportError)  an optional extra is not installed
    ├── ModelError                          anything a model call can fail with
    │   ├── ModelConnectionError            network failure, refused connection, garbled body
    │   │   └── ModelTimeoutError           the request timed out
    │   ├── AuthenticationError             bad or missing API key (401/403)
    │   ├── RateLimitError                  429; ``retry_after`` seconds when known
    │   ├── ServerError                     5xx from the provider
    │   ├── BadRequestError                 other 4xx
    │   │   └── ContextWindowExceededError  the request did not fit the model's window
    │   ├── EmptyResponseError              the model answered with nothing
    │   └── StructuredOutputError           no valid structured output after retries
    ├── CompressionError                    summary generation failed, fallback disabled
    └── WorkspaceError                      an offload store failed
        ├── UnsafePathError (ValueError)    an id or path would leave the workspace
        ├── SessionLeasedError              another worker holds the session's lease
        └── LeaseLostError                  this worker's lease was taken over
"""

from __future__ import annotations

__all__ = [
    "AuthenticationError",
    "BadRequestError",
    "CompressionError",
    "ContextWindowExceededError",
    "ContextfoldError",
    "EmptyResponseError",
    "LeaseLostError",
    "MessageFormatError",
    "MissingDependencyError",
    "ModelConnectionError",
    "ModelError",
    "ModelTimeoutError",
    "RateLimitError",
    "ServerError",
    "SessionLeasedError",
    "StructuredOutputError",
    "UnsafePathError",
    "WorkspaceError",
]


class ContextfoldError(Exception):
    """Base class of every error contextfold raises."""


class MessageFormatError(ContextfoldError, ValueError):
    """A message or tool call in a provider format is malformed.

    The text says which message and which field is wrong.
    """


class MissingDependencyError(ContextfoldError, ImportError):
    """An optional dependency is missing; the message names the extra to install."""

    def __init__(self, package: str, extra: str, *, command: str | None = None) -> None:
        command = command or f"pip install 'contextfold[{extra}]'"
        super().__init__(f"{package!r} is not installed; install it with: {command}")
        self.package = package
        self.extra = extra


class ModelError(ContextfoldError):
    """A model call failed."""

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class ModelConnectionError(ModelError):
    """The provider could not be reached."""


class ModelTimeoutError(ModelConnectionError):
    """The request timed out."""


class AuthenticationError(ModelError):
    """The provider rejected the credentials."""


class RateLimitError(ModelError):
    """The provider is rate limiting; ``retry_after`` is in seconds when known."""

    def __init__(
        self, message: str, *, status_code: int | None = 429, retry_after: float | None = None
    ) -> None:
        super().__init__(message, status_code=status_code)
        self.retry_after = retry_after


class ServerError(ModelError):
    """The provider failed (5xx)."""


class BadRequestError(ModelError):
    """The provider rejected the request (4xx other than auth and rate limits)."""


class ContextWindowExceededError(BadRequestError):
    """The request was larger than the model's context window."""


class EmptyResponseError(ModelError):
    """The model returned no content at all."""


class StructuredOutputError(ModelError):
    """The model did not produce output valid against the schema after all retries.

    ``attempts`` is how many answers were asked for, when known.
    """

    def __init__(self, message: str, *, attempts: int | None = None) -> None:
        super().__init__(message)
        self.attempts = attempts


class CompressionError(ContextfoldError):
    """Context compression failed and fallback to truncation is disabled.

    The context is left exactly as it was before the attempt.
    """


class WorkspaceError(ContextfoldError):
    """An offload store operation failed."""


class UnsafePathError(WorkspaceError, ValueError):
    """A session id, tool-call id or path would read or write outside the workspace."""


class SessionLeasedError(WorkspaceError):
    """Another worker holds the session's lease: running it here too could corrupt it.

    The text names the holder and when its lease expires unless renewed.
    """


class LeaseLostError(WorkspaceError):
    """This worker's lease on a session expired and another worker took the session over;
    its state writes are refused, and it should stop running the session."""
