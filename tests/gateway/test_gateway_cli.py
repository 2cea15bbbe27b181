"""``contextfold serve``: its options, a bad upstream refused, and a real start."""

from __future__ import annotations

import subprocess
import sys
import time

import httpx
import pytest
from typer.testing import CliRunner

from contextfold.cli import app

from .servers import ScriptedUpstream, free_port


def test_serve_lists_its_options() -> None:
    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    options = (
        "--upstream",
        "--port",
        "--host",
        "--pass-through-context-management",
        "--summarizer",
    )
    for option in options:
        assert option in result.output


def test_serve_refuses_an_unknown_summarizer() -> None:
    args = ["serve", "--upstream", "http://127.0.0.1:9", "--summarizer", "magic"]
    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "summarize_with must be 'extractive' or 'model'" in result.output


def test_serve_refuses_an_upstream_that_is_not_http() -> None:
    result = CliRunner().invoke(app, ["serve", "--upstream", "ftp://example.com"])
    assert result.exit_code == 2
    assert "upstream must be an http(s) URL" in result.output


def test_serve_starts_and_answers_health(upstream: ScriptedUpstream) -> None:
    port = free_port()
    command = [sys.executable, "-m", "contextfold.cli", "serve", "--upstream", upstream.url]
    proc = subprocess.Popen([*command, "--port", str(port)], stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                got = httpx.get(f"http://127.0.0.1:{port}/health")
                break
            except httpx.ConnectError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                assert time.monotonic() < deadline, "the gateway did not start"
                time.sleep(0.2)
        assert got.json() == {"status": "ok", "upstream": upstream.url}
    finally:
        proc.terminate()
        proc.wait(10)


def test_serve_freezes_the_heap_it_starts_with(monkeypatch: pytest.MonkeyPatch) -> None:
    """What exists when serving starts (the modules, the app) is out of the cyclic
    collector's view, so a full collection does not walk it during a request."""
    import gc

    import contextfold.gateway._serve as serving_module
    from contextfold.gateway import GatewayConfig, serve

    frozen: list[int] = []
    monkeypatch.setattr(
        serving_module.uvicorn, "run", lambda app, **_: frozen.append(gc.get_freeze_count())
    )
    gc.unfreeze()
    try:
        serve(GatewayConfig(upstream="http://127.0.0.1:9"), port=free_port())
    finally:
        gc.unfreeze()
    assert len(frozen) == 1
    assert frozen[0] > 10_000
