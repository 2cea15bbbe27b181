"""Gateway figure: what transparent mode costs under Anthropic's prompt-cache rules, on the
recorded Claude Code sessions (issue 29, point 4: never more expensive than no gateway).

Each recorded session (``claude-code-*`` in the shared data, the ones whose provider
counters show caching) is rebuilt call by call as the requests Claude Code sent: its
history at that call (``fig_cache_validation.load_sessions``, Claude Code's own compaction
included) in the Messages API form with Claude Code's breakpoints (end of the system
prompt, end of the last message), behind a stand-in system prompt as large as what the
recording lacks (tool schemas and system prompt: the first call's recorded prompt less our
count of its messages). Three sequences of requests are then priced with the repository's
cache simulator (``contextfold.replay``: ``anthropic_blocks`` and the ``anthropic`` model of
``pricing.json``, calls timed as recorded, output tokens as recorded):

- direct: the requests as rebuilt;
- gateway: the same requests sent through the real gateway (``create_app`` served by
  uvicorn on loopback, transparent mode, default extractive summarizer, in-memory state,
  the ``x-claude-code-session-id`` header set), in front of an upstream on loopback that
  answers each request with the recorded response; priced on what the upstream received;
- drop-oldest: the trivial strategy at the same window: the oldest messages dropped until
  the request fits (from an assistant message, behind a one-line user note, so no tool
  call loses its result);
- LiteLLM (with ``--litellm PATH``): the same requests through LiteLLM's proxy with its
  prompt compression on (:mod:`.gateway_cost_litellm`), priced on what it forwarded.

Beside them, two columns explain the read share. "writes gateway / direct": the tokens
each sequence writes to the cache; a gateway cannot write less than the new content of
each call. "best share within the window": the highest read share any strategy can
reach that forwards each call's new content and keeps every request within the window
(by the gateway's count): each request at its largest, everything but the new content
read (and nothing read after more than the cache lifetime without a call). Where direct
requests pass the window, this is below direct's share: shorter requests with the same
new content read a smaller part of what they send.

Then the Codex sessions (:mod:`.gateway_cost_codex`), under OpenAI's cache rules.

    python -m benchmarks.gateway_cost [--window 200000 --window 100000] [--trigger 0.8]
        [--keep 0.25] [--litellm /work/venv-litellm/bin/litellm] [--no-codex]

Needs the ``gateway`` extra. Prints the Markdown tables of BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from contextfold.gateway import CountCache, GatewayConfig, TransparentPolicy, create_app
from contextfold.message import anthropic_request, to_anthropic_request
from contextfold.replay import anthropic_blocks, cache_model, load_prices
from contextfold.token import AnthropicEstimator, TokenCounter

from ._gateway_servers import serving_in_thread
from .fig_cache_validation import RecordedCall, Session, load_sessions, recordings_dir
from .gateway_cost_codex import run_codex
from .gateway_cost_codex import table as codex_table
from .gateway_cost_litellm import LITELLM_DOCS, litellm_version, through_litellm

__all__ = [
    "Priced",
    "best_share",
    "count_compactions",
    "direct_bodies",
    "drop_oldest",
    "main",
    "price",
    "run_session",
]

DROPPED_NOTE = "[Earlier messages were dropped to fit the context window.]"


@dataclass(frozen=True)
class Priced:
    """A sequence of requests priced under the cache model."""

    dollars: float
    uncached: int
    write: int
    read: int
    new: int = 0
    """Tokens not in the previous request's prefix: what a perfect prefix cache (no
    lifetime, no minimum, no lookback limit) would still have to send uncached."""

    @property
    def input(self) -> int:
        return self.uncached + self.write + self.read

    @property
    def read_share(self) -> float:
        return self.read / self.input if self.input else 0.0

    @property
    def ceiling(self) -> float:
        """The read share of a perfect prefix cache on the same requests."""
        return 1 - self.new / self.input if self.input else 0.0


def _filler(tokens: int, counter: TokenCounter) -> str:
    """A deterministic stand-in system prompt of about ``tokens`` tokens."""
    unit = "You are an interactive coding agent; follow the repository's conventions. "
    per = max(counter.count_text(unit), 1)
    return unit * max(tokens // per, 1)


def direct_bodies(session: Session, counter: TokenCounter) -> list[dict[str, Any]]:
    """The session's requests as Claude Code sent them (rebuilt; see the module docstring)."""
    first = anthropic_request(session.calls[0].history, cache=True)
    ours = sum(b.tokens for b in anthropic_blocks(first, counter))
    system = _filler(max(session.calls[0].input_tokens - ours, 0), counter)
    bodies = []
    for call in session.calls:
        body = anthropic_request(call.history, cache=True)
        bodies.append(
            {
                "model": "claude-sonnet-4-5",
                "max_tokens": 32_000,
                "system": [
                    {"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}
                ],
                "messages": body["messages"],
            }
        )
    return bodies


def _response(calls: Sequence[RecordedCall], i: int, output: int) -> dict[str, Any]:
    """The recorded answer to call ``i``: the assistant message that follows its history."""
    content: list[Any] = [{"type": "text", "text": "(not recorded)"}]
    here = calls[i].history
    if i + 1 < len(calls):
        nxt = calls[i + 1].history
        if len(nxt) > len(here) and nxt[len(here)].role == "assistant":
            _, wire = to_anthropic_request([nxt[len(here)]])
            if wire and isinstance(wire[0].get("content"), list):
                content = wire[0]["content"]
    call = calls[i]
    return {
        "id": f"msg_{i:04d}",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": "tool_use"
        if any(b.get("type") == "tool_use" for b in content)
        else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": call.input_tokens - call.cache_read - call.cache_write,
            "cache_read_input_tokens": call.cache_read,
            "cache_creation_input_tokens": call.cache_write,
            "output_tokens": output,
        },
    }


def _recording_upstream(
    answers: dict[int, dict[str, Any]], received: dict[int, bytes]
) -> Starlette:
    async def messages(request: Request) -> Response:
        body = await request.body()
        i = int(request.headers["x-replay-call"])
        received[i] = body
        return JSONResponse(answers[i])

    return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])


def send_session(
    upstream: Starlette,
    session: Session,
    bodies: Sequence[dict[str, Any]],
    policy: TransparentPolicy,
) -> list[str]:
    """``bodies`` sent in order, as ``session``'s one conversation (Claude Code's session
    header, each call numbered in ``x-replay-call``), through a transparent gateway in
    front of ``upstream``; the texts of the client's replies."""
    replies = []
    with serving_in_thread(upstream) as upstream_url:
        app = create_app(GatewayConfig(upstream=upstream_url), transparent=policy)
        with (
            serving_in_thread(app) as gateway,
            httpx.Client(base_url=gateway, timeout=120) as client,
        ):
            for i, body in enumerate(bodies):
                reply = client.post(
                    "/v1/messages",
                    content=json.dumps(body, ensure_ascii=False).encode(),
                    headers={
                        "content-type": "application/json",
                        "anthropic-version": "2023-06-01",
                        "x-api-key": "sk-ant-replay",
                        "x-claude-code-session-id": session.name,
                        "x-replay-call": str(i),
                    },
                )
                reply.raise_for_status()
                replies.append(reply.text)
    return replies


def through_gateway(
    session: Session,
    bodies: Sequence[dict[str, Any]],
    outputs: Sequence[int],
    policy: TransparentPolicy,
) -> list[dict[str, Any]]:
    """What the upstream received when ``bodies`` were sent through the gateway."""
    answers = {i: _response(session.calls, i, outputs[i]) for i in range(len(bodies))}
    received: dict[int, bytes] = {}
    send_session(_recording_upstream(answers, received), session, bodies, policy)
    return [json.loads(received[i]) for i in range(len(bodies))]


def claude_code_sessions(only: str | None) -> list[Session]:
    """The recorded Claude Code sessions (those whose name contains ``only``, if given)."""
    sessions = [s for s in load_sessions(recordings_dir()) if s.agent == "claude-code"]
    return [s for s in sessions if only in s.name] if only else sessions


def drop_oldest(
    body: dict[str, Any], window: int, counter: TokenCounter, counts: CountCache
) -> dict[str, Any]:
    """``body`` with its oldest messages dropped until it fits ``window`` (the trivial
    strategy), cut before an assistant message behind a one-line note."""
    messages = body["messages"]
    sizes = [counts.count(counter, m) for m in messages]
    fixed = counts.fixed(counter, body.get("system"), body.get("tools"))
    if fixed + sum(sizes) <= window:
        return body
    suffix = 0
    start = len(messages) - 1
    for k in range(len(messages) - 1, 0, -1):
        suffix += sizes[k]
        if fixed + suffix > window:
            break
        if messages[k]["role"] == "assistant":
            start = k
    while start > 0 and messages[start]["role"] != "assistant":
        start -= 1
    note = {"role": "user", "content": [{"type": "text", "text": DROPPED_NOTE}]}
    return {**body, "messages": [note, *messages[start:]]}


def price(
    bodies: Sequence[dict[str, Any]],
    times: Sequence[float],
    outputs: Sequence[int],
    counter: TokenCounter,
) -> Priced:
    """``bodies`` sent at ``times`` under the ``anthropic`` cache model and its prices."""
    rates = load_prices()["anthropic"]
    model = cache_model("anthropic", rates)
    dollars = 0.0
    uncached = write = read = new = 0
    previous: list[str] = []
    for body, at, output in zip(bodies, times, outputs, strict=True):
        blocks = anthropic_blocks(body, counter)
        usage = model.request(blocks, at=at)
        shared = 0
        for block, key in zip(blocks, previous, strict=False):
            if block.key != key:
                break
            shared += block.tokens
        new += sum(b.tokens for b in blocks) - shared
        previous = [b.key for b in blocks]
        uncached += usage.uncached
        write += usage.write
        read += usage.read
        dollars += (
            usage.uncached * rates["input"]
            + usage.write * rates["cache_write"]
            + usage.read * rates["cache_read"]
            + output * rates["output"]
        ) / 1e6
    return Priced(dollars, uncached, write, read, new)


def best_share(
    bodies: Sequence[dict[str, Any]],
    times: Sequence[float],
    window: int,
    counter: TokenCounter,
    counts: CountCache,
) -> float:
    """The highest read share of any strategy that forwards each call's new content and
    keeps each request within ``window`` by the gateway's count (see the module
    docstring): request ``i`` at its largest, ``c_i = min(T_i, window x T_i / G_i)``
    (``T_i`` its tokens under the pricing count, ``G_i`` under the gateway's), of
    which at least its new content is not read (all of it after more than the cache
    lifetime without a call). A bound: the cache's minimum length and lookback are
    ignored."""
    ttl = float(load_prices()["anthropic"].get("ttl_seconds", 300))
    sent = unread = 0.0
    previous: list[str] = []
    last = None
    for body, at in zip(bodies, times, strict=True):
        blocks = anthropic_blocks(body, counter)
        total = sum(b.tokens for b in blocks)
        shared = 0
        for block, key in zip(blocks, previous, strict=False):
            if block.key != key:
                break
            shared += block.tokens
        previous = [b.key for b in blocks]
        gateway_count = counts.fixed(counter, body.get("system"), body.get("tools")) + sum(
            counts.count(counter, m) for m in body["messages"]
        )
        cap = min(total, window * total / gateway_count) if gateway_count else total
        expired = last is not None and at - last > ttl
        sent += cap
        unread += cap if expired or last is None else min(total - shared, cap)
        last = at
    return 1 - unread / sent if sent else 0.0


def _outputs(session: Session) -> list[int]:
    """Output tokens per call as recorded (the answer's usage, in the next call's history);
    300 for the last call. The same in every variant: output is not what a gateway changes."""
    out = []
    calls = session.calls
    for i, call in enumerate(calls):
        tokens = 300
        if i + 1 < len(calls) and len(calls[i + 1].history) > len(call.history):
            usage = calls[i + 1].history[len(call.history)].usage
            if usage is not None:
                tokens = usage.output_tokens
        out.append(tokens)
    return out


def count_compactions(forwarded: Sequence[dict[str, Any]]) -> int:
    """How many times the forwarded requests' first message became a new summary."""
    firsts = [
        m["content"][0].get("text", "") if isinstance(m["content"], list) else ""
        for m in (b["messages"][0] for b in forwarded)
    ]
    return sum(
        1 for a, b in itertools.pairwise(firsts) if a != b and b.startswith("This conversation")
    )


@dataclass(frozen=True)
class SessionResult:
    name: str
    calls: int
    peak: int
    recorded_share: float
    direct: Priced
    gateway: Priced
    dropped: Priced
    compactions: int
    best: float
    """The best read share within the window (:func:`best_share`)."""
    litellm: Priced | None = None


def run_session(
    session: Session,
    policy: TransparentPolicy,
    counter: TokenCounter,
    litellm: Sequence[dict[str, Any]] | None = None,
) -> SessionResult:
    """``session`` direct, through the gateway and dropped; ``litellm`` is what LiteLLM's
    proxy forwarded for its calls, when it ran."""
    counts = CountCache()
    bodies = direct_bodies(session, counter)
    outputs = _outputs(session)
    times = [c.at for c in session.calls]
    forwarded = through_gateway(session, bodies, outputs, policy)
    dropped = [drop_oldest(b, policy.window, counter, counts) for b in bodies]
    compactions = count_compactions(forwarded)
    recorded = sum(c.cache_read for c in session.calls) / max(
        sum(c.input_tokens for c in session.calls), 1
    )
    return SessionResult(
        session.name,
        len(session.calls),
        max(c.input_tokens for c in session.calls),
        recorded,
        price(bodies, times, outputs, counter),
        price(forwarded, times, outputs, counter),
        price(dropped, times, outputs, counter),
        compactions,
        best_share(bodies, times, policy.window, counter, counts),
        price(litellm, times, outputs, counter) if litellm is not None else None,
    )


def _cell(p: Priced | None) -> str:
    return f"${p.dollars:.3f} ({100 * p.read_share:.1f}%)" if p is not None else "not run"


def table(results: Sequence[SessionResult], policy: TransparentPolicy) -> str:
    rows = []
    for r in results:
        met = (
            r.gateway.dollars <= r.direct.dollars + 1e-9
            and r.gateway.read_share >= r.direct.read_share - 0.01
        )
        rows.append(
            f"| {r.name} | {r.calls} | {r.peak:,} | {100 * r.recorded_share:.1f}% "
            f"| {_cell(r.direct)} | {_cell(r.gateway)} | {r.compactions} "
            f"| {100 * (r.gateway.dollars / r.direct.dollars - 1):+.1f}% "
            f"| {100 * (r.gateway.read_share - r.direct.read_share):+.1f} "
            f"| {r.gateway.write / max(r.direct.write, 1):.3f} "
            f"| {100 * r.gateway.ceiling:.1f}% | {100 * r.best:.1f}% "
            f"| {_cell(r.dropped)} | {_cell(r.litellm)} | {'yes' if met else 'no'} |"
        )
    return (
        f"Window {policy.window:,} tokens (gateway counter), trigger {policy.trigger}, keep "
        f"{policy.keep}, extractive summarizer.\n\n"
        "| session | calls | peak prompt (recorded) | recorded read share | direct $ (read share) "
        "| gateway $ (read share) | gateway compactions | gateway vs direct "
        "| share diff (points) | writes gateway / direct | gateway's perfect-cache share "
        "| best share within the window | drop-oldest $ (read share) "
        "| LiteLLM $ (read share) | target met |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
        + "\n".join(rows)
        + "\n"
    )


def idle_memory(summary: str, sessions: int = 1_000) -> float:
    """Bytes the gateway holds per idle conversation in transparent mode: its state (with a
    summary as long as ``summary``) and its lock, in memory (no store), by tracemalloc."""
    import asyncio
    import tracemalloc

    from contextfold.gateway import SessionState, SessionStates

    async def fill(states: SessionStates) -> None:
        for i in range(sessions):
            key = f"cc:session-{i:06d}:agent"
            async with states.lock(key):
                text = f"{i:06d} {summary}"  # a string of its own per conversation
                await states.save(key, SessionState(cut=40, cut_digest="a" * 64, summary=text))

    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    states = SessionStates()
    asyncio.run(fill(states))
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return (after - before) / sessions


def _litellm_rows(
    command: str, sessions: Sequence[Session], policy: TransparentPolicy, counter: TokenCounter
) -> list[list[dict[str, Any]]]:
    """What LiteLLM's proxy forwarded for each call of each session (one proxy for all),
    its trigger where the gateway's is. A call it sent more than once (a retrieval
    loop) is priced on its first request; a call it did not send stops the run."""
    runs = []
    for session in sessions:
        bodies = direct_bodies(session, counter)
        outputs = _outputs(session)
        answers = [_response(session.calls, i, outputs[i]) for i in range(len(bodies))]
        runs.append((session.name, bodies, answers))
    received = through_litellm(command, runs, int(policy.trigger * policy.window))
    out = []
    for (name, _, _), calls in zip(runs, received, strict=True):
        if any(not c for c in calls):
            raise RuntimeError(f"LiteLLM forwarded no request for a call of {name}")
        out.append([c[0] for c in calls])
    return out


def session_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every replay of the recorded sessions takes: the policy's trigger and
    keep, which sessions, and LiteLLM's proxy as the peer."""
    parser.add_argument("--trigger", type=float, default=0.8)
    parser.add_argument("--keep", type=float, default=0.25)
    parser.add_argument("--only", default=None, help="sessions whose name contains this")
    parser.add_argument(
        "--litellm", default=None, help="the `litellm` command of a venv with litellm[proxy]"
    )


def peer_rows(
    litellm: str | None,
    sessions: Sequence[Session],
    policy: TransparentPolicy,
    counter: TokenCounter,
) -> list[list[dict[str, Any]] | None]:
    """What LiteLLM's proxy forwarded for each session (:func:`_litellm_rows`), or ``None``
    for each when it is not run."""
    if not litellm:
        return [None] * len(sessions)
    return list(_litellm_rows(litellm, sessions, policy, counter))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--window", type=int, action="append")
    session_arguments(parser)
    parser.add_argument("--no-codex", action="store_true", help="skip the Codex sessions")
    parser.add_argument(
        "--memory", action="store_true", help="only the memory per idle conversation"
    )
    args = parser.parse_args(argv)
    counter = AnthropicEstimator()
    if args.memory:
        for chars in (2_000, 10_000, 40_000):
            per = idle_memory("x" * chars)
            print(f"summary of {chars:,} characters: {per / 1024:.1f} KB per idle conversation")
        return
    sessions = claude_code_sessions(args.only)
    if args.litellm:
        print(f"LiteLLM {litellm_version(args.litellm)}, prompt compression ({LITELLM_DOCS})\n")
    for window in args.window or [200_000, 100_000]:
        policy = TransparentPolicy(window=window, trigger=args.trigger, keep=args.keep)
        peer = peer_rows(args.litellm, sessions, policy, counter)
        results = [run_session(s, policy, counter, p) for s, p in zip(sessions, peer, strict=True)]
        print(table(results, policy), flush=True)
        if not args.no_codex:
            print(codex_table(run_codex(window, args.trigger), window, args.trigger), flush=True)


if __name__ == "__main__":
    main()
