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
    """What exists when serving starts (the modules, the app, and what the app's startup
    and uvicorn's made: the tokenizer, the server) is out of the cyclic collector's view,
    so a full collection does not walk it during a request; and a request's parsed body
    does not start young collections (the threshold is raised)."""
    import gc

    import contextfold.gateway._serve as serving_module
    from contextfold.gateway import GatewayConfig, serve

    seen: list[tuple[int, int, int]] = []

    async def serving(server: object) -> None:  # uvicorn.Server.main_loop: serving starts
        seen.append((gc.get_freeze_count(), len(gc.get_objects()), gc.get_threshold()[0]))
        server.should_exit = True  # type: ignore[attr-defined]

    monkeypatch.setattr(serving_module.uvicorn.Server, "main_loop", serving)
    threshold = gc.get_threshold()
    gc.unfreeze()
    try:
        serve(GatewayConfig(upstream="http://127.0.0.1:9"), port=free_port())
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
    assert len(seen) == 1
    frozen, unfrozen, young = seen[0]
    assert frozen > 10_000
    assert unfrozen < 500  # 2,399 when the heap was frozen before the app's startup only
    assert young >= 10_000
