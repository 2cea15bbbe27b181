"""Gateway figure: latency the gateway adds to a non-compacting ~100k-token request, and
to the first byte of a streamed answer (issue 29).

Every server runs in a process of its own on loopback (``benchmarks._gateway_servers``):
a plain asyncio upstream that answers at once, the trivial proxy (uvicorn, Starlette and
httpx relaying the bytes: the floor of any Python gateway on this stack), and the gateway
in three modes: pass-through (``context_management`` passed through: the hop alone),
emulating (the default: the body parsed, the request's edits applied, the field
stripped), and transparent (``--window 200000``, one conversation). The request is a
coding session of about 100k tokens (our counter) carrying what Claude Code sends with
thinking on, ``clear_thinking_20251015`` with ``keep: "all"``: nothing is cleared, nothing
compacted. Each round adds a short exchange to the conversation (as an agent does, the
last message's ``cache_control`` moved) and sends that round's request once on each path,
in turn; the figures are the p50 and p99 of each path's time minus the direct time of the
same round, and the CPU time each proxy's process used per request (``/proc/PID/stat``:
on a loaded machine the wall-clock figures carry the scheduler's delays, the CPU time
does not). ``--stream`` does the same with ``"stream": true`` and times the first byte
of the answer (the upstream sends its first event at once, the rest 5 ms later).
``--litellm PATH`` (LiteLLM's ``litellm`` command, in its own environment) adds the peer:
LiteLLM's proxy on its Anthropic pass-through route and on its ``/v1/messages`` route
(``_gateway_servers.litellm_serving``: configured as its documentation recommends), sent
the same requests as the relay and the gateway, in turn, in the same rounds.

The default path's decision on Claude Code's no-op (``_kept``: two msgspec passes) is timed
beside msgspec's lightest pass over the same messages. The transform alone (in this
process, no HTTP) is timed as the gateway did it before the
incremental path (``json.loads``, every message digested and counted, ``json.dumps``)
and as it does now (parse once, the previous request's prefix verified by one SHA-256
pass, only new messages digested and counted, the client's bytes reused); the edit step
alone as before (Claude Code's no-op; ``clear_tool_uses`` at its default trigger, cold
and with the previous turn counted).

    python -m benchmarks.fig_gateway_latency [--rounds 300] [--stream] [--litellm PATH]
        [--plain-stack] [--floors]

``--floors`` adds, in the same rounds, the floors of ``benchmarks._gateway_servers``
(non-streamed only): a bare proxy with no HTTP library, then uvicorn with a bare ASGI app
whose upstream is raw writes, the gateway's upstream client, or httpx's: where the hop's
time goes.

The relay and the gateway run on the same uvicorn stack: uvloop and httptools where
installed (the ``gateway`` extra installs them), or asyncio and h11 (``--plain-stack``).

Needs the ``gateway`` extra.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import httpx

from contextfold.gateway import CountCache, apply_context_management
from contextfold.token import AnthropicEstimator

from ._gateway_servers import KEY, MODEL


def session(target_tokens: int) -> dict[str, Any]:
    """A tool-using session of about ``target_tokens`` (our counter)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    counter = AnthropicEstimator()
    i = 0
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 100, "messages": messages}
    while apply_context_management(body, counter).input_tokens < target_tokens:
        for _ in range(20):
            messages.append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": f"Step {i}: reading the next file."},
                        {
                            "type": "tool_use",
                            "id": f"toolu_{i}",
                            "name": "read",
                            "input": {"path": f"src/m{i}.py"},
                        },
                    ],
                }
            )
            source = "\n".join(f"def f{i}_{j}(x):\n    return x * {j} + {i}" for j in range(40))
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": source},
                    ],
                }
            )
            i += 1
    messages.append({"role": "assistant", "content": "Read them all."})
    messages.append({"role": "user", "content": "Now fix it."})
    return body


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


CLAUDE_CODE_NO_OP = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}


def conversation(rounds: int) -> list[dict[str, Any]]:
    """The ~100k-token session, then one more short exchange per round, each request's
    last block carrying Claude Code's moving ``cache_control`` marker."""
    base = session(100_000)
    out: list[dict[str, Any]] = []
    messages = [json.loads(json.dumps(m)) for m in base["messages"]]
    for r in range(rounds):
        messages = [*messages]
        messages.append({"role": "assistant", "content": [{"type": "text", "text": f"Done {r}."}]})
        messages.append({"role": "user", "content": [{"type": "text", "text": f"Next {r}."}]})
        marked = [*messages]
        last = marked[-1]
        marked[-1] = {
            **last,
            "content": [{**last["content"][0], "cache_control": {"type": "ephemeral"}}],
        }
        out.append({**base, "messages": marked, "context_management": CLAUDE_CODE_NO_OP})
    return out


def _transform_steps(bodies: list[dict[str, Any]]) -> dict[str, list[float]]:
    """The transparent transform alone, as before (full) and now (incremental)."""
    import asyncio

    from contextfold.context import ExtractiveSummarizer
    from contextfold.gateway import SessionState, TransparentPolicy
    from contextfold.gateway._prefix import checkpoint_after, recall
    from contextfold.gateway._transparent import forward
    from contextfold.gateway._wire import dumps, parse_body

    policy = TransparentPolicy(window=200_000)
    counter = AnthropicEstimator()
    summarizer = ExtractiveSummarizer()
    raws = [json.dumps(b, ensure_ascii=False).encode() for b in bodies]
    times: dict[str, list[float]] = {"full": [], "incremental": []}

    async def run() -> None:
        full_state, state, checkpoint = SessionState(), SessionState(), None
        full_counts, counts = CountCache(), CountCache()
        for raw in raws:
            start = time.perf_counter()
            data = json.loads(raw)
            done = await forward(
                data, full_state, policy, counter=counter, summarizer=summarizer, counts=full_counts
            )
            dumps(done.body).encode()
            times["full"].append(time.perf_counter() - start)
            full_state = done.state
            start = time.perf_counter()
            parsed = parse_body(raw)
            known = recall(parsed, checkpoint, counter)
            done = await forward(
                parsed.data,
                state,
                policy,
                counter=counter,
                summarizer=summarizer,
                counts=counts,
                known=known,
            )
            parsed.dumps(done.body)
            assert known is not None
            assert done.counted is not None
            checkpoint = checkpoint_after(known, counter, done.counted)
            times["incremental"].append(time.perf_counter() - start)
            state = done.state

    asyncio.run(run())
    return {k: v[1:] for k, v in times.items()}  # the first request has no previous one


def _no_op_decision(raw: bytes, rounds: int) -> dict[str, list[float]]:
    """What the gateway's default path does with Claude Code's no-op before forwarding it
    (``_kept.kept_as_is``: msgspec's pass over the body's members, then its typed pass over
    every block's ``type``), beside msgspec's lightest pass over the same messages (each
    as raw bytes, nothing typed): the least any decision that reads the messages costs."""
    import msgspec

    from contextfold.gateway._kept import kept_as_is

    messages = json.dumps(json.loads(raw)["messages"]).encode()
    lightest = msgspec.json.Decoder(list[msgspec.Raw])
    times: dict[str, list[float]] = {"kept": [], "raw pass": []}
    for _ in range(rounds):
        start = time.perf_counter()
        assert kept_as_is(raw) is not None
        times["kept"].append(time.perf_counter() - start)
        start = time.perf_counter()
        lightest.decode(messages)
        times["raw pass"].append(time.perf_counter() - start)
    return times


def _edit_steps(body: dict[str, Any], rounds: int) -> dict[str, list[float]]:
    """The edit step alone (``apply_context_management``, parse excluded): Claude Code's
    no-op, and ``clear_tool_uses`` at its default trigger (the whole request counted),
    cold and with the session's previous turn already counted (``CountCache``)."""
    counter = AnthropicEstimator()
    raw = json.dumps(body).encode()
    times: dict[str, list[float]] = {"no-op": [], "cold": [], "warm": []}
    for _ in range(rounds):
        parsed = json.loads(raw)
        start = time.perf_counter()
        apply_context_management(parsed, AnthropicEstimator())
        times["no-op"].append(time.perf_counter() - start)
    times.update(_no_op_decision(raw, rounds * 5))
    trigger = {"edits": [{"type": "clear_tool_uses_20250919"}]}  # 100k trigger: counts all
    previous = {**body, "messages": body["messages"][:-2], "context_management": trigger}
    with_trigger = {**body, "context_management": trigger}
    for _ in range(max(rounds // 4, 3)):
        start = time.perf_counter()
        _ = apply_context_management(with_trigger, AnthropicEstimator()).input_tokens
        times["cold"].append(time.perf_counter() - start)
        cache = CountCache()
        _ = apply_context_management(previous, counter, cache=cache).input_tokens
        start = time.perf_counter()
        _ = apply_context_management(with_trigger, counter, cache=cache).input_tokens
        times["warm"].append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--stream", action="store_true", help="time to first byte, streamed")
    parser.add_argument("--litellm", default=None, help="LiteLLM's `litellm` command: the peer")
    parser.add_argument(
        "--plain-stack",
        action="store_true",
        help="the relay and the gateway on asyncio and h11 even if uvloop and httptools are here",
    )
    parser.add_argument(
        "--floors", action="store_true", help="the floors too: where the hop's time goes"
    )
    args = parser.parse_args()
    if args.floors and args.stream:
        parser.error("--floors times whole answers, not a stream's first byte")
    from contextlib import ExitStack

    from ._gateway_servers import cpu_seconds, litellm_serving, serving

    bodies = conversation(args.rounds + 3)
    counter = AnthropicEstimator()
    tokens = apply_context_management(bodies[-1], counter).input_tokens
    if args.stream:
        bodies = [{**b, "stream": True} for b in bodies]
    plain = [
        json.dumps({k: v for k, v in b.items() if k != "context_management"}).encode()
        for b in bodies
    ]
    noop = [json.dumps(b).encode() for b in bodies]
    headers = {
        "x-api-key": KEY,
        "anthropic-version": "2023-06-01",
        "content-type": "application/json",
        "x-contextfold-session": "bench",
    }
    servers = {
        "trivial relay": ("relay",),
        "gateway, pass-through": ("gateway", "--pass"),
        "gateway, emulating": ("gateway",),
        "gateway, transparent": ("gateway", "--window", "200000"),
    }
    if args.floors:
        servers = {
            "floor: bare uvloop proxy, no HTTP library": ("floor",),
            "floor: uvicorn + bare ASGI, raw upstream writes": ("bare-raw",),
            "floor: uvicorn + bare ASGI, the gateway's upstream client": ("bare-client",),
            "floor: uvicorn + bare ASGI, httpx.AsyncClient": ("bare-httpx",),
            **servers,
        }
    peers = {"LiteLLM, pass-through": "passthrough", "LiteLLM, /v1/messages": "unified"}
    with ExitStack() as stack, httpx.Client(timeout=60) as client:
        upstream, _ = stack.enter_context(serving("upstream"))
        urls: dict[str, str] = {}
        pids: dict[str, int] = {}
        stack_option = ("--plain-stack",) if args.plain_stack else ()
        for name, (kind, *options) in servers.items():
            running = serving(kind, upstream, *options, *stack_option)
            urls[name], pids[name] = stack.enter_context(running)
        if args.litellm is not None:
            for name, mode in peers.items():
                running = litellm_serving(args.litellm, upstream, mode)
                urls[name], pids[name] = stack.enter_context(running)
        added: dict[str, list[float]] = {name: [] for name in urls}

        def post(url: str, raw: bytes) -> float:
            start = time.perf_counter()
            if args.stream:
                with client.stream(
                    "POST", f"{url}/v1/messages", content=raw, headers=headers
                ) as response:
                    response.raise_for_status()
                    chunks = response.iter_raw()
                    next(chunks)
                    elapsed = time.perf_counter() - start
                    for _ in chunks:
                        pass
                return elapsed
            client.post(f"{url}/v1/messages", content=raw, headers=headers).raise_for_status()
            return time.perf_counter() - start

        def body(name: str, r: int) -> bytes:
            """The hops that pass the request on as it is get it without the no-op edit."""
            as_is = name == "gateway, pass-through" or name.startswith("floor")
            return plain[r] if as_is else noop[r]

        for r in range(3):  # warm every path (the transparent one's conversation starts)
            post(upstream, plain[r])
            for name, url in urls.items():
                post(url, body(name, r))
        cpu = {name: cpu_seconds(pid) for name, pid in pids.items()}
        for r in range(3, len(bodies)):
            direct = post(upstream, plain[r])
            for name, url in urls.items():
                added[name].append(post(url, body(name, r)) - direct)
        cpu = {name: (cpu_seconds(pid) - cpu[name]) / args.rounds for name, pid in pids.items()}
    ms = 1000
    what = "time to first byte" if args.stream else "added latency"
    from importlib.util import find_spec

    fast = find_spec("uvloop") is not None and find_spec("httptools") is not None
    server_stack = "uvloop + httptools" if fast and not args.plain_stack else "asyncio + h11"
    print(f"request: {len(noop[-1]):,} bytes, {tokens:,} tokens ({counter.name})")
    print(f"relay and gateway on uvicorn with {server_stack}")
    target = "<= 2 ms over direct" if args.stream else "p50 <= 1 ms, p99 <= 5 ms"
    print(f"rounds: {args.rounds}; target (issue 29): {what} {target}")
    for name, values in added.items():
        p50, p95 = statistics.median(values) * ms, _pct(values, 0.95) * ms
        p99 = _pct(values, 0.99) * ms
        print(
            f"{what} over direct, {name}: p50 {p50:.2f} ms, p95 {p95:.2f} ms, p99 {p99:.2f} ms; "
            f"CPU per request {cpu[name] * ms:.2f} ms "
            f"({cpu[name] / cpu['trivial relay']:.2f}x the relay's)"
        )
    if not args.stream:
        steps = _transform_steps(bodies[: min(len(bodies), 60)])
        for name, values in steps.items():
            p50, p99 = statistics.median(values) * ms, _pct(values, 0.99) * ms
            print(f"transparent transform alone, {name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms")
        labels = {
            "no-op": "edit step alone, Claude Code's no-op",
            "kept": "the no-op as the default path decides it (two msgspec passes, _kept)",
            "raw pass": "msgspec's lightest pass over the same messages (each as raw bytes)",
            "cold": "edit step, clear_tool_uses at its input_tokens trigger, cold",
            "warm": "the same, the previous turn already counted (CountCache)",
        }
        for name, values in _edit_steps(bodies[-1], 40).items():
            p50, p99 = statistics.median(values) * ms, _pct(values, 0.99) * ms
            print(f"{labels[name]}: p50 {p50:.2f} ms, p99 {p99:.2f} ms")


if __name__ == "__main__":
    main()
