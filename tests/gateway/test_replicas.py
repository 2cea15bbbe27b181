"""Several replicas of ``contextfold serve --state postgresql://...`` behind a (scripted)
load balancer, as users run them: real processes (uvicorn), one real PostgreSQL, the
official ``anthropic`` SDK as the client, a scripted upstream on loopback.

What the upstream receives must be what one uninterrupted gateway forwards, byte for
byte, whichever replica each request reaches, and after a replica is killed (SIGKILL)
while a request it acknowledged is in flight; two conversations side by side never share
state.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response

from .conftest import SECRET
from .servers import ScriptedUpstream, free_port, message
from .test_transparent import MODEL, SYSTEM, TOOLS, Conversation, summary_text

pytest.importorskip("asyncpg", reason="PostgreSQL needs contextfold[postgres]")

WINDOW = ["--window", "8000"]


@dataclass
class Gateway:
    proc: subprocess.Popen[bytes]
    url: str

    def kill(self) -> None:
        """SIGKILL: no shutdown, no lease released, nothing flushed."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)


@pytest.fixture
def gateways(upstream: ScriptedUpstream) -> Iterator[Any]:
    """``start(*options)``: a ``contextfold serve`` process in front of ``upstream``."""
    started: list[Gateway] = []

    def start(*options: str) -> Gateway:
        port = free_port()
        command = [sys.executable, "-m", "contextfold.cli", "serve", "--upstream", upstream.url]
        proc = subprocess.Popen(
            [*command, "--port", str(port), *WINDOW, *options], stderr=subprocess.PIPE
        )
        gateway = Gateway(proc, f"http://127.0.0.1:{port}")
        started.append(gateway)
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"{gateway.url}/health")
                return gateway
            except httpx.ConnectError:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                assert time.monotonic() < deadline, "the gateway did not start"
                time.sleep(0.1)

    yield start
    for gateway in started:
        if gateway.proc.poll() is None:
            gateway.proc.terminate()
            gateway.proc.wait(10)


def send(conversation: Conversation, url: str, tag: str) -> Any:
    """One request of ``conversation``, marked ``x-test-turn: tag`` upstream."""
    return anthropic.Anthropic(base_url=url, api_key=SECRET, max_retries=0).messages.create(
        model=MODEL,
        max_tokens=64,
        system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        tools=TOOLS,  # type: ignore[arg-type]
        messages=conversation.wire(),  # type: ignore[arg-type]
        extra_headers={**conversation.headers, "x-test-turn": tag},
    )


def raw(upstream: ScriptedUpstream, tag: str) -> list[bytes]:
    """The bodies the upstream received for requests marked ``tag``, as bytes, in order."""
    return [r.body for r in upstream.received if r.headers.get("x-test-turn") == tag]


def answered(upstream: ScriptedUpstream, n: int = 400) -> None:
    for _ in range(n):
        upstream.then_json(message("ok"))


TURNS = 26
KILLED = 18
"""The turn (from 0) in flight on the replica that is killed: after the first compaction."""


def reference(gateways: Any, upstream: ScriptedUpstream, c: Conversation) -> list[bytes]:
    """What one uninterrupted gateway (state in memory) forwards for ``c``, turn by turn."""
    alone = gateways()
    for turn in range(TURNS):
        c.step()
        send(c, alone.url, f"ref-{turn}")
    return [raw(upstream, f"ref-{turn}")[0] for turn in range(TURNS)]


def test_replicas_on_one_postgres_forward_what_one_gateway_forwards_across_a_kill(
    gateways: Any, upstream: ScriptedUpstream, pg_dsn: str, pg_prefix: str
) -> None:
    answered(upstream)
    session = {"x-claude-code-session-id": str(uuid.uuid4())}
    expected = reference(gateways, upstream, Conversation("Find every item.", headers=session))
    compactions = [
        t
        for t in range(1, TURNS)
        if summary_text(plain_json(expected[t])) != summary_text(plain_json(expected[t - 1]))
    ]
    assert compactions
    assert compactions[0] < KILLED < TURNS - 3

    state = ["--state", pg_dsn, "--state-prefix", pg_prefix]
    a, b = gateways(*state), gateways(*state)
    c = Conversation("Find every item.", headers={"x-claude-code-session-id": str(uuid.uuid4())})
    for turn in range(KILLED):
        c.step()
        send(c, (a, b)[turn % 2].url, f"t{turn}")

    # Turn KILLED reaches A, which decides, saves, forwards, and is killed while the
    # upstream has not answered yet: the client sees the connection drop and retries on B.
    c.step()
    upstream.script.insert(0, hang_until_disconnected)
    failed: list[BaseException] = []

    def in_flight() -> None:
        try:
            send(c, a.url, "killed-a")
        except anthropic.APIConnectionError as exc:
            failed.append(exc)

    thread = threading.Thread(target=in_flight)
    thread.start()
    deadline = time.monotonic() + 30
    while not raw(upstream, "killed-a"):
        assert time.monotonic() < deadline, "A never forwarded the request"
        time.sleep(0.01)
    a.kill()
    thread.join(30)
    assert failed, "the client must have seen the killed replica's connection drop"
    send(c, b.url, "killed-b")

    # The conversation goes on, alternating between B and a new replica on the same store.
    a2 = gateways(*state)
    for turn in range(KILLED + 1, TURNS):
        c.step()
        send(c, (a2, b)[turn % 2].url, f"t{turn}")

    for turn in range(TURNS):
        if turn == KILLED:
            continue
        assert raw(upstream, f"t{turn}") == [expected[turn]], f"turn {turn} differs"
    # What the killed replica forwarded is what one gateway forwards, and so is the retry
    # of the same request on B.
    assert raw(upstream, "killed-a") == [expected[KILLED]]
    assert raw(upstream, "killed-b") == [expected[KILLED]]


async def hang_until_disconnected(request: Request, _received: Any) -> Response:
    """An upstream that does not answer until the gateway hangs up (it is killed)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if await request.is_disconnected():
            break
        await asyncio.sleep(0.02)
    return Response(status_code=499)


def plain_json(body: bytes) -> Any:
    return json.loads(body)


def test_two_conversations_side_by_side_on_two_replicas_never_share_state(
    gateways: Any, upstream: ScriptedUpstream, pg_dsn: str, pg_prefix: str
) -> None:
    """Two subagents of one Claude Code session (one session id, different first
    messages), each request to whichever replica: each forwards exactly what it forwards
    alone through one gateway."""
    answered(upstream)

    def pair() -> tuple[Conversation, Conversation]:
        session = {"x-claude-code-session-id": str(uuid.uuid4())}
        return (
            Conversation("Refactor the parser.", headers=session),
            Conversation("Explore: list the tests.", headers=session, size=200),
        )

    turns = 22
    alone = gateways()
    ref_big, ref_small = pair()
    for turn in range(turns):
        for name, conv in (("big", ref_big), ("small", ref_small)):
            conv.step()
            send(conv, alone.url, f"ref-{name}-{turn}")

    state = ["--state", pg_dsn, "--state-prefix", pg_prefix]
    a, b = gateways(*state), gateways(*state)
    big, small = pair()
    for turn in range(turns):
        for i, (name, conv) in enumerate((("big", big), ("small", small))):
            conv.step()
            send(conv, (a, b)[(turn + i) % 2].url, f"{name}-{turn}")

    for name in ("big", "small"):
        for turn in range(turns):
            assert raw(upstream, f"{name}-{turn}") == raw(upstream, f"ref-{name}-{turn}"), (
                f"{name} turn {turn} differs"
            )
    assert any(summary_text(plain_json(raw(upstream, f"big-{t}")[0])) for t in range(turns))
    assert not any(summary_text(plain_json(raw(upstream, f"small-{t}")[0])) for t in range(turns))


def test_serve_refuses_a_state_it_cannot_keep() -> None:
    from typer.testing import CliRunner

    from contextfold.cli import app

    base = ["serve", "--upstream", "http://127.0.0.1:9", "--window", "8000"]
    runner = CliRunner()
    result = runner.invoke(app, [*base, "--state", "s3://bucket/x"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "expected a SQLite file or a postgresql:// DSN, got a s3:// URL" in result.output
    dsn = "postgresql://u:secret@127.0.0.1:1/db"
    bad = [*base, "--state", dsn, "--state-prefix", "Bad-Prefix"]
    result = runner.invoke(app, bad, env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "table_prefix must match" in result.output
    assert "secret" not in result.output
    alone = ["serve", "--upstream", "http://127.0.0.1:9", "--state", "gateway.sqlite"]
    result = runner.invoke(app, alone, env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "--state keeps transparent mode's state: it needs --window" in result.output
