"""The blob tier: content-addressed bytes kept beside a record store."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

__all__ = ["BlobStore", "blob_digest", "check_digest"]

_DIGEST = re.compile(r"[0-9a-f]{64}")


@runtime_checkable
class BlobStore(Protocol):
    """Large bodies by the SHA-256 of their bytes (hex), for a workspace that keeps its
    records elsewhere (``PostgresWorkspace(..., blobs=S3Workspace(...))``).

    A digest names one immutable body, so a put is idempotent and a retry after a timeout
    is always safe. The record store decides what is still referenced; the blob store only
    stores, fetches and deletes.
    """

    async def initialize(self) -> None:
        """Connect; idempotent."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...

    async def put_blob(self, digest: str, body: bytes) -> None:
        """Store ``body`` under ``digest`` (its SHA-256); a no-op if it is already there."""
        ...

    async def get_blob(self, digest: str) -> bytes | None:
        """The body stored under ``digest``, ``None`` if there is none."""
        ...

    async def delete_blobs(self, digests: Sequence[str]) -> None:
        """Delete these bodies; digests not stored are ignored."""
        ...


def blob_digest(body: bytes) -> str:
    """The name of ``body`` in a :class:`BlobStore`: its SHA-256, in hex."""
    return hashlib.sha256(body).hexdigest()


def check_digest(digest: str) -> str:
    """``digest`` if it is 64 lowercase hex digits; ``ValueError`` otherwise."""
    if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
        raise ValueError(f"not a SHA-256 hex digest: {digest!r}")
    return digest
