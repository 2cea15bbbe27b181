"""Compressed request bodies: gzip and deflate (any HTTP client), zstd (Codex compresses its
Responses requests with it), each decoded within the size limit; a bomb gets a 413 and an
unknown or broken encoding a provider-shaped error, never a crash."""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable

import httpx
import pytest

from .conftest import SECRET, GatewayFactory
from .history import tool_history
from .servers import ScriptedUpstream, message

zstandard = pytest.importorskip("zstandard", reason="zstd needs the gateway extra")

ENCODERS: dict[str, Callable[[bytes], bytes]] = {
    "gzip": gzip.compress,
    "deflate": zlib.compress,
    "zstd": lambda raw: zstandard.ZstdCompressor().compress(raw),
}


def body() -> bytes:
    edit = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "input_tokens", "value": 1_000},
        "keep": {"type": "tool_uses", "value": 1},
    }
    return json.dumps(
        {
            "model": "claude-test",
            "max_tokens": 32,
            "messages": tool_history(4),
            "context_management": {"edits": [edit]},
        }
    ).encode()


def post(url: str, content: bytes, encoding: str) -> httpx.Response:
    headers = {
        "x-api-key": SECRET,
        "anthropic-version": "2023-06-01",
        "content-type": "application/json",
        "content-encoding": encoding,
    }
    return httpx.post(f"{url}/v1/messages", content=content, headers=headers, timeout=10)


@pytest.mark.parametrize("encoding", sorted(ENCODERS))
def test_an_encoded_body_is_decoded_edited_and_forwarded_plain(
    encoding: str, start_gateway: GatewayFactory, upstream: ScriptedUpstream
) -> None:
    url = start_gateway(timeout=5.0)
    upstream.then_json(message("ok"))
    got = post(url, ENCODERS[encoding](body()), encoding)
    assert got.status_code == 200, got.text
    assert got.json()["context_management"]["applied_edits"][0]["cleared_tool_uses"] == 3
    (sent,) = upstream.received
    assert "content-encoding" not in sent.headers
    assert "context_management" not in sent.json()


@pytest.mark.parametrize("encoding", sorted(ENCODERS))
def test_a_body_that_expands_past_the_limit_is_refused(
    encoding: str, start_gateway: GatewayFactory, upstream: ScriptedUpstream
) -> None:
    url = start_gateway(timeout=5.0, max_body_bytes=64 * 1024)
    bomb = ENCODERS[encoding](b'{"messages": "' + b"a" * 10_000_000 + b'"}')
    assert len(bomb) < 64 * 1024
    got = post(url, bomb, encoding)
    assert got.status_code == 413
    assert got.json()["type"] == "error"
    assert upstream.received == []


@pytest.mark.parametrize("encoding", sorted(ENCODERS))
def test_a_broken_encoded_body_gets_a_400(
    encoding: str, start_gateway: GatewayFactory, upstream: ScriptedUpstream
) -> None:
    url = start_gateway(timeout=5.0)
    got = post(url, b"\x00\x01 not compressed at all", encoding)
    assert got.status_code == 400
    assert encoding in got.json()["error"]["message"]
    assert upstream.received == []


def test_an_unknown_encoding_gets_a_415(
    start_gateway: GatewayFactory, upstream: ScriptedUpstream
) -> None:
    url = start_gateway(timeout=5.0)
    got = post(url, body(), "br")
    assert got.status_code == 415
    assert "zstd" in got.json()["error"]["message"]
    assert upstream.received == []
