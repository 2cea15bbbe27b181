"""The server stack: ``contextfold serve`` and the embedded upstream run on uvloop and
httptools when installed (the ``gateway`` extra installs them), and still serve on the
standard library's asyncio and h11 when they are not."""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any

import httpx
import pytest
import uvicorn

import contextfold.gateway._embedded as embedded_module
import contextfold.gateway._serve as serving_module
from contextfold.gateway import GatewayConfig, create_app, serve, serving_upstream
from contextfold.gateway._serve import server_stack
from contextfold.model import ScriptedModel

from .servers import ScriptedUpstream, free_port, message

FAST = {"loop": "uvloop", "http": "httptools"}
PLAIN = {"loop": "asyncio", "http": "h11"}


def _without_fast_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if uvloop and httptools were not installed."""
    real = find_spec
    missing = {"uvloop", "httptools"}
    monkeypatch.setattr(
        serving_module, "find_spec", lambda name: None if name in missing else real(name)
    )


def test_the_gateway_extra_brings_the_fast_stack() -> None:
    """The extra installs them (this environment installs the extra), so it is what runs."""
    assert find_spec("uvloop") is not None
    assert find_spec("httptools") is not None
    assert server_stack() == FAST


def test_serve_runs_on_the_stack_it_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    ran: list[dict[str, Any]] = []

    async def serving(server: uvicorn.Server) -> None:  # main_loop: serving has started
        ran.append({"loop": server.config.loop, "http": server.config.http})
        server.should_exit = True

    monkeypatch.setattr(serving_module.uvicorn.Server, "main_loop", serving)
    serve(GatewayConfig(upstream="http://127.0.0.1:9"), port=free_port())
    _without_fast_stack(monkeypatch)
    serve(GatewayConfig(upstream="http://127.0.0.1:9"), port=free_port())
    assert ran == [FAST, PLAIN]


@pytest.mark.parametrize("fast", [True, False], ids=["uvloop-httptools", "asyncio-h11"])
def test_the_embedded_upstream_answers_on_either_stack(
    monkeypatch: pytest.MonkeyPatch, fast: bool
) -> None:
    if not fast:
        _without_fast_stack(monkeypatch)
    configs: list[uvicorn.Config] = []
    real = uvicorn.Config

    def recording(*args: Any, **kwargs: Any) -> uvicorn.Config:
        configs.append(real(*args, **kwargs))
        return configs[-1]

    monkeypatch.setattr(embedded_module.uvicorn, "Config", recording)
    with serving_upstream(ScriptedModel()) as url:
        got = httpx.get(f"{url}/v1/models")
    assert got.status_code == 200
    assert got.json()["object"] == "list"
    assert {"loop": configs[0].loop, "http": configs[0].http} == (FAST if fast else PLAIN)


@pytest.mark.parametrize("stack", [FAST, PLAIN], ids=["uvloop-httptools", "asyncio-h11"])
def test_the_gateway_relays_byte_for_byte_on_either_stack(
    upstream: ScriptedUpstream, stack: dict[str, str]
) -> None:
    """What ``serve`` runs, on each stack: a pass-through request reaches the upstream as
    the client sent it."""
    import threading
    import time

    upstream.then_json(message("hello"))
    app = create_app(GatewayConfig(upstream=upstream.url, pass_through_context_management=True))
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", **stack)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive(), "the gateway did not start"
        assert time.monotonic() < deadline, "the gateway did not start in time"
        time.sleep(0.01)
    raw = (
        b'{"model": "m",  "max_tokens": 5, "messages": [{"role": "user", "content": "hi \\u00e9"}]}'
    )
    try:
        got = httpx.post(
            f"http://127.0.0.1:{port}/v1/messages",
            content=raw,
            headers={"x-api-key": "k", "anthropic-version": "2023-06-01"},
        )
    finally:
        server.should_exit = True
        thread.join(10)
    assert got.status_code == 200
    assert got.json()["content"][0]["text"] == "hello"
    assert upstream.received[-1].body == raw
