"""Two gateway replicas on one PostgreSQL store, served in this process (each on its own
event loop and connection pool), with the official ``anthropic`` SDK as the client: the
store is the truth (no replica forwards from a stale copy), one replica decides for a
conversation at a time (a lease), a replica whose lease lapsed cannot overwrite the newer
state (fencing), a dead replica's lease is waited out with a bound, and past the bound the
request fails open or closed as configured.

The summarizers here tag their summaries with the replica's name and a call number, as a
model's summaries differ from call to call: a decision one replica overwrites with another
shows as a summary that changes while the conversation's cut does not.
"""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any

import anthropic
import pytest

from contextfold.context import ExtractiveSummarizer, SummaryRequest, SummaryResult
from contextfold.gateway import GatewayConfig, SessionState, TransparentPolicy, create_app
from contextfold.workspace import PostgresWorkspace

from .conftest import SECRET
from .servers import ScriptedUpstream, message, serving
from .test_transparent import MODEL, SYSTEM, TOOLS, Conversation, plain, summary_text

pytest.importorskip("asyncpg", reason="PostgreSQL needs contextfold[postgres]")

POLICY = TransparentPolicy(window=8_000, trigger=0.8, keep=0.25)
STATE_PREFIX = "gateway-transparent/"


@dataclass
class Tagged:
    """The extractive summary, tagged ``[name #n]``; ``pause`` seconds spent first, awaited
    (the replica keeps running) or, with ``block``, slept (the replica's event loop stops,
    as a stopped VM or a long GC stops a process: its lease is not renewed)."""

    name: str
    pause: float = 0.0
    block: bool = False
    calls: int = 0
    done: threading.Event = field(default_factory=threading.Event)

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        n = self.calls
        if self.pause and n == 1:
            if self.block:
                time.sleep(self.pause)  # noqa: ASYNC251  # the point: the loop stops
            else:
                await asyncio.sleep(self.pause)
        result = await ExtractiveSummarizer().summarize(request)
        fields = dict(result.fields)
        fields["task_overview"] = f"[{self.name} #{n}] {fields.get('task_overview', '')}"
        self.done.set()
        return SummaryResult(fields=fields)


@dataclass
class Replica:
    url: str
    app: Any

    @property
    def metrics(self) -> Any:
        return self.app.state.gateway.metrics


@pytest.fixture
def replicas(upstream: ScriptedUpstream, pg_dsn: str, pg_prefix: str) -> Iterator[Any]:
    """Start a replica on the test's PostgreSQL tables: ``start(summarizer, **config)``."""
    with ExitStack() as stack:

        def start(summarizer: Any = None, **fields: Any) -> Replica:
            store = PostgresWorkspace(pg_dsn, table_prefix=pg_prefix, max_connections=4)
            config = GatewayConfig(upstream=upstream.url, **fields)
            app = create_app(config, transparent=POLICY, sessions=store, summarizer=summarizer)
            return Replica(stack.enter_context(serving(app)), app)

        yield start


def answered(upstream: ScriptedUpstream, n: int = 400) -> None:
    """Every request the upstream gets is answered (some are forwarded by a replica whose
    client already left)."""
    for _ in range(n):
        upstream.then_json(message("ok"))


def send(conversation: Conversation, url: str, tag: str, *, timeout: float = 30.0) -> Any:
    """One request of ``conversation`` to ``url``, marked ``x-test-turn: tag`` upstream."""
    return anthropic.Anthropic(
        base_url=url, api_key=SECRET, max_retries=0, timeout=timeout
    ).beta.messages.create(
        model=MODEL,
        max_tokens=64,
        system=[{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}],
        tools=TOOLS,  # type: ignore[arg-type]
        messages=conversation.wire(),  # type: ignore[arg-type]
        extra_headers={**conversation.headers, "x-test-turn": tag},
    )


def forwarded(upstream: ScriptedUpstream, tag: str) -> list[dict[str, Any]]:
    """The bodies the upstream received for requests marked ``tag``, in order."""
    return [r.json() for r in upstream.received if r.headers.get("x-test-turn") == tag]


def cut_of(body: dict[str, Any], conversation_length: int) -> int:
    """How many of the client's messages the body's summary replaces (0 without one)."""
    if summary_text(body) is None:
        return 0
    return conversation_length - (len(body["messages"]) - 1)


def conversation() -> Conversation:
    return Conversation(
        "Find every item and fix it.", headers={"x-contextfold-session": uuid.uuid4().hex}
    )


FIRST_COMPACTION = 8
"""The turn (from 0) on which this conversation first passes ``POLICY``'s trigger."""


def until_compacting(c: Conversation, url: str, upstream: ScriptedUpstream) -> int:
    """Send the turns before the first compaction; the turn that compacts is next."""
    for turn in range(FIRST_COMPACTION):
        c.step()
        send(c, url, f"t{turn}")
        assert summary_text(forwarded(upstream, f"t{turn}")[-1]) is None
    return FIRST_COMPACTION


def test_alternating_replicas_forward_what_one_gateway_forwards(
    upstream: ScriptedUpstream, replicas: Any
) -> None:
    """Before the fix each replica kept its own copy of a state it had read or written and
    forwarded from it: after the other replica compacted, the stale one forwarded the
    uncompacted history, and its save dropped the compaction."""
    answered(upstream)
    reference = conversation()
    alone = replicas(ExtractiveSummarizer())
    for turn in range(24):
        reference.step()
        send(reference, alone.url, f"r{turn}")
    expected = [plain(forwarded(upstream, f"r{t}")[0]) for t in range(24)]
    changes = sum(summary_text(x) != summary_text(y) for x, y in itertools.pairwise(expected))
    assert changes >= 2  # compacted at least twice

    a, b = replicas(ExtractiveSummarizer()), replicas(ExtractiveSummarizer())
    c = conversation()
    for turn in range(24):
        c.step()
        send(c, (a, b)[turn % 2].url, f"c{turn}")
    got = [plain(forwarded(upstream, f"c{t}")[0]) for t in range(24)]
    for turn in range(24):
        assert got[turn] == expected[turn], f"turn {turn} differs"


def test_a_retry_on_another_replica_while_the_first_still_decides_loses_no_decision(
    upstream: ScriptedUpstream, replicas: Any
) -> None:
    """The client times out on replica A, which is still writing a summary, and retries on
    B. Before the fix B compacted too and the client went on with B's summary, then A's
    save replaced it: the prefix changed again with no compaction. Now B waits for A's
    lease and forwards A's decision."""
    answered(upstream)
    slow = Tagged("A", pause=2.0)
    a, b = replicas(slow), replicas(Tagged("B"))
    c = conversation()
    first = until_compacting(c, b.url, upstream)
    c.step()
    with pytest.raises(anthropic.APITimeoutError):
        send(c, a.url, "compacting-a", timeout=0.5)
    send(c, b.url, "compacting-b")  # the client's retry
    tags = ["compacting-b"]
    for turn in range(first + 1, first + 3):
        assert slow.done.wait(10)
        time.sleep(0.3)  # A's save, had it been allowed, is done by now
        c.step()
        send(c, b.url, f"t{turn}")
        tags.append(f"t{turn}")
    bodies = [forwarded(upstream, tag)[0] for tag in tags]
    summaries = [summary_text(x) for x in bodies]
    assert summaries[0] is not None
    cuts = [cut_of(x, 2 * (first + 1 + i) + 1) for i, x in enumerate(bodies)]
    assert cuts[0] == cuts[1] == cuts[2] > 0  # one compaction, then none
    assert summaries[0] == summaries[1] == summaries[2]  # and it was never replaced
    assert "[A #" in str(summaries[0])  # B waited for A's decision and forwarded it
    assert a.metrics.compactions == 1
    assert b.metrics.compactions == 0


def test_a_paused_replica_whose_lease_lapsed_cannot_overwrite_the_newer_state(
    upstream: ScriptedUpstream, replicas: Any
) -> None:
    """Replica A stops (its event loop blocked 2.5 s: no lease renewal) while writing a
    summary; its 1 s lease lapses, B takes the conversation over, compacts and saves. When
    A wakes its save is refused (fencing) and it forwards the request unchanged (fail
    open, counted); B's decision stays."""
    answered(upstream)
    stalled = Tagged("A", pause=2.5, block=True)
    a = replicas(stalled, session_lease_ttl=1.0, session_wait=5.0)
    b = replicas(Tagged("B"), session_lease_ttl=1.0, session_wait=5.0)
    c = conversation()
    first = until_compacting(c, b.url, upstream)
    c.step()
    with pytest.raises(anthropic.APITimeoutError):
        send(c, a.url, "compacting-a", timeout=0.5)
    send(c, b.url, "compacting-b")
    assert stalled.done.wait(10)
    deadline = time.monotonic() + 10
    while a.metrics.untransformed == 0:
        assert time.monotonic() < deadline, "A never gave up its stale decision"
        time.sleep(0.05)
    tags = ["compacting-b"]
    for turn in range(first + 1, first + 3):
        c.step()
        send(c, b.url, f"t{turn}")
        tags.append(f"t{turn}")
    served, stale = forwarded(upstream, "compacting-b"), forwarded(upstream, "compacting-a")
    assert "[B #" in str(summary_text(served[0]))
    # A forwards nothing it could not save: the request as the client sent it, if anything
    # (here nothing, as its client is gone).
    for body in stale:
        assert plain(body["messages"]) == plain(c.history[: 2 * (first + 1) + 1])
    summaries = [summary_text(forwarded(upstream, tag)[0]) for tag in tags]
    assert summaries[0] == summaries[1] == summaries[2]
    assert a.metrics.compactions == 0
    assert a.metrics.untransformed == 1


@contextmanager
def dead_holder(dsn: str, prefix: str, lease_id: str, ttl: float) -> Iterator[float]:
    """A worker process takes ``lease_id``'s lease and is killed (SIGKILL) while holding
    it; yields the time.monotonic() at which it died."""
    code = (
        "import asyncio, os, signal, sys\n"
        "from contextfold.workspace import PostgresWorkspace\n"
        "async def main():\n"
        "    ws = PostgresWorkspace(sys.argv[1], table_prefix=sys.argv[2], max_connections=1)\n"
        "    await ws.initialize()\n"
        "    await ws.acquire_lease(sys.argv[3], ttl=float(sys.argv[4]))\n"
        "    print('held', flush=True)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "asyncio.run(main())\n"
    )
    args = [sys.executable, "-c", code, dsn, prefix, lease_id, str(ttl)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=60)
    assert out.strip() == "held", err
    assert proc.returncode == -9
    yield time.monotonic()


def saved_state(dsn: str, prefix: str, key: str) -> SessionState | None:
    async def load() -> str | None:
        ws = PostgresWorkspace(dsn, table_prefix=prefix, max_connections=1)
        await ws.initialize()
        try:
            return await ws.load_state(STATE_PREFIX + key)
        finally:
            await ws.close()

    text = asyncio.run(load())
    return None if text is None else SessionState.from_json(text)


def test_a_killed_replicas_lease_is_waited_out_then_the_retry_is_served(
    upstream: ScriptedUpstream, replicas: Any, pg_dsn: str, pg_prefix: str
) -> None:
    answered(upstream)
    gateway = replicas(ExtractiveSummarizer(), session_wait=10.0)
    c = conversation()
    first = until_compacting(c, gateway.url, upstream)
    key = "h:" + c.headers["x-contextfold-session"]
    with dead_holder(pg_dsn, pg_prefix, STATE_PREFIX + key, ttl=2.0) as died:
        c.step()
        send(c, gateway.url, "after-kill")
        waited = time.monotonic() - died
    assert waited > 1.0  # the dead holder's lease ran out first (2 s from its grant)
    body = forwarded(upstream, "after-kill")[0]
    assert summary_text(body) is not None  # and the decision was made: compacted
    state = saved_state(pg_dsn, pg_prefix, key)
    assert state is not None
    assert state.compactions == 1
    assert state.seen == 2 * (first + 1) + 1
    assert gateway.metrics.session_busy == 0


def test_past_the_wait_a_request_fails_open_without_compaction_or_state_change(
    upstream: ScriptedUpstream, replicas: Any, pg_dsn: str, pg_prefix: str
) -> None:
    answered(upstream)
    gateway = replicas(ExtractiveSummarizer(), session_wait=0.3)
    c = conversation()
    until_compacting(c, gateway.url, upstream)
    key = "h:" + c.headers["x-contextfold-session"]
    before = saved_state(pg_dsn, pg_prefix, key)
    with dead_holder(pg_dsn, pg_prefix, STATE_PREFIX + key, ttl=30.0):
        c.step()
        send(c, gateway.url, "busy")
    body = forwarded(upstream, "busy")[0]
    assert summary_text(body) is None  # would have compacted: the state is not ours to change
    assert plain(body["messages"]) == plain(c.history)
    assert saved_state(pg_dsn, pg_prefix, key) == before
    assert gateway.metrics.session_busy == 1
    assert gateway.metrics.untransformed == 0


def test_past_the_wait_a_request_fails_closed_with_a_529_when_configured(
    upstream: ScriptedUpstream, replicas: Any, pg_dsn: str, pg_prefix: str
) -> None:
    answered(upstream)
    gateway = replicas(ExtractiveSummarizer(), session_wait=0.3, fail_closed=True)
    c = conversation()
    c.step()
    key = "h:" + c.headers["x-contextfold-session"]
    seen = len(upstream.received)
    with (
        dead_holder(pg_dsn, pg_prefix, STATE_PREFIX + key, ttl=30.0),
        pytest.raises(anthropic.APIStatusError) as caught,
    ):
        send(c, gateway.url, "busy")
    assert caught.value.status_code == 529
    assert caught.value.body["error"]["type"] == "overloaded_error"  # type: ignore[index]
    assert len(upstream.received) == seen  # nothing forwarded
    assert gateway.metrics.session_busy == 1
