"""Reading a client's request body within the size limit, and as JSON."""

from __future__ import annotations

import io
import json
import zlib
from typing import Any

from starlette.requests import Request

from ._wire import ParsedBody, parse_body

__all__ = ["BodyError", "read_body", "read_json", "read_parsed"]


class BodyError(Exception):
    """A request body the gateway cannot take: the HTTP status and the reason."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def read_body(request: Request, limit: int) -> bytes:
    """The body, decoded from ``gzip``/``deflate``/``zstd`` (Codex compresses its requests
    with zstd) if so sent; a ``BodyError`` past ``limit``.

    The limit applies to the bytes received and again to the decoded bytes, so a small
    compressed body cannot expand without bound.
    """
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyError(413, f"request body is {declared} bytes; the limit is {limit}")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise BodyError(413, f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    encoding = request.headers.get("content-encoding", "identity").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding == "zstd":
        return _zstd(body, limit)
    if encoding not in ("gzip", "deflate"):
        raise BodyError(
            415, f"content-encoding {encoding!r} is not supported (gzip, deflate, zstd)"
        )
    wbits = 31 if encoding == "gzip" else 15
    decoder = zlib.decompressobj(wbits)
    try:
        decoded = decoder.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BodyError(400, f"request body is not valid {encoding}: {exc}") from None
    if len(decoded) > limit or decoder.unconsumed_tail:
        raise BodyError(413, f"decoded request body exceeds the limit of {limit} bytes")
    return decoded


def _zstd(body: bytes, limit: int) -> bytes:
    """``body`` decoded from zstd, reading at most ``limit + 1`` bytes of output, so a
    bomb stops at the limit."""
    try:
        import zstandard
    except ImportError:  # pragma: no cover - the gateway extra installs it
        raise BodyError(415, "content-encoding 'zstd' needs the zstandard package") from None
    try:
        with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(body)) as reader:
            decoded = reader.read(limit + 1)
    except zstandard.ZstdError as exc:
        raise BodyError(400, f"request body is not valid zstd: {exc}") from None
    if len(decoded) > limit:
        raise BodyError(413, f"decoded request body exceeds the limit of {limit} bytes")
    return decoded


def read_json(body: bytes) -> dict[str, Any]:
    """The body as a JSON object; a ``BodyError`` (400) saying where it is malformed."""
    try:
        value = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BodyError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BodyError(400, f"request body must be a JSON object, got {type(value).__name__}")
    return value


def read_parsed(body: bytes) -> ParsedBody:
    """The body as a JSON object that remembers where its parts are (so what is
    forwarded reuses the client's bytes); a ``BodyError`` (400) as :func:`read_json`."""
    try:
        value = parse_body(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BodyError(400, f"request body is not valid JSON: {exc}") from None
    if not isinstance(value, ParsedBody):
        raise BodyError(400, f"request body must be a JSON object, got {type(value).__name__}")
    return value
