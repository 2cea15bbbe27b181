"""What one gateway process is configured with: a frozen value, checked once."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import urlsplit

__all__ = ["FIRST_PARTY_HOSTS", "GatewayConfig"]

FIRST_PARTY_HOSTS = frozenset({"api.anthropic.com"})
"""Hosts that run Anthropic's own ``context_management``: passed through by default."""


@dataclass(frozen=True)
class GatewayConfig:
    """The gateway's settings.

    ``upstream`` is the provider's base URL without ``/v1`` (``https://api.anthropic.com``).
    ``pass_through_context_management``: ``None`` (the default) passes Anthropic's
    ``context_management`` through to a first-party upstream and emulates it for any
    other; ``True`` or ``False`` decide for every upstream.
    """

    upstream: str
    max_body_bytes: int = 32 * 1024 * 1024
    """Larger request bodies get a 413 (Anthropic's own limit is 32 MB)."""
    timeout: float = 600.0
    """Seconds without a byte from the upstream before the request is reported timed out."""
    connect_timeout: float = 10.0
    pass_through_context_management: bool | None = None
    fail_closed: bool = False
    """A request whose context management fails (an input the edits or the counter cannot
    read, a summary that cannot be written) is answered with a provider-shaped 500 instead
    of being forwarded unedited (the default: fail open, counted in
    ``contextfold_gateway_untransformed_total``)."""
    session_lease_ttl: float = 10.0
    """Seconds a replica's lease on a conversation lasts unless renewed (renewed every
    third of it while the replica decides; transparent mode on a store that grants
    leases). A replica killed mid-decision holds its conversations this long."""
    session_wait: float = 15.0
    """Seconds a request waits for its conversation while another request (here or on
    another replica) decides for it; then it is forwarded without a compaction and without
    changing the state (counted in ``contextfold_gateway_session_busy_total``), or, when
    failing closed, answered with a 529 ``overloaded_error``, which SDKs retry. Longer than
    ``session_lease_ttl`` by default, so a retry outlasts a killed replica's lease."""
    summarize_with: Literal["extractive", "model"] = "extractive"
    """Who writes a ``compact_20260112`` summary: the app's summarizer (by default the
    extractive one, no model call) or ``"model"``, the request's own model through the
    upstream with the client's credentials, as Anthropic does."""

    def __post_init__(self) -> None:
        parts = urlsplit(self.upstream)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError(f"upstream must be an http(s) URL, got {self.upstream!r}")
        if self.max_body_bytes <= 0:
            raise ValueError(f"max_body_bytes must be positive, got {self.max_body_bytes}")
        if self.summarize_with not in ("extractive", "model"):
            raise ValueError(
                f"summarize_with must be 'extractive' or 'model', got {self.summarize_with!r}"
            )
        if self.timeout <= 0 or self.connect_timeout <= 0:
            raise ValueError("timeouts must be positive")
        if self.session_lease_ttl <= 0 or self.session_wait < 0:
            raise ValueError(
                "session_lease_ttl must be positive and session_wait not negative, got "
                f"{self.session_lease_ttl} and {self.session_wait}"
            )
        object.__setattr__(self, "upstream", self.upstream.rstrip("/").removesuffix("/v1"))

    @property
    def passes_context_management(self) -> bool:
        """Whether Anthropic's ``context_management`` goes upstream as sent."""
        if self.pass_through_context_management is not None:
            return self.pass_through_context_management
        return urlsplit(self.upstream).hostname in FIRST_PARTY_HOSTS
