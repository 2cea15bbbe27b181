"""Gateway figure: latency the gateway adds to a non-compacting ~100k-token request (issue 29).

Both servers run on loopback with uvicorn in threads of this process: an upstream that
answers every ``/v1/messages`` with a fixed short message, and the gateway in front of it
(emulating ``context_management``, default ``AnthropicEstimator`` counter). The request is
a coding session of about 100k tokens (our counter) carrying what Claude Code sends with
thinking on, ``clear_thinking_20251015`` with ``keep: "all"``: nothing is cleared. Each
round sends it once directly and once through the gateway; the figures are the p50 and
p99 of the differences, and of the in-process edit step alone
(``apply_context_management``: parse excluded, counting included). "relayed" is the
same request through a gateway configured to pass ``context_management`` through: the
cost of the hop alone. The edit step is also timed with ``clear_tool_uses_20250919`` at
its default trigger (the whole request counted), cold and with the session's previous
turn already counted (``CountCache``, as the gateway keeps it).

    python -m benchmarks.fig_gateway_latency [--rounds 40]

Needs the ``gateway`` extra.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from contextfold.gateway import CountCache, GatewayConfig, apply_context_management, create_app
from contextfold.token import AnthropicEstimator

ANSWER = {
    "id": "msg_1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "ok"}],
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "usage": {"input_tokens": 1, "output_tokens": 1},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def _serving(app: Any) -> Iterator[str]:
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def _upstream() -> Starlette:
    async def answer(request: Request) -> Response:
        await request.body()
        return JSONResponse(ANSWER)

    return Starlette(routes=[Route("/v1/messages", answer, methods=["POST"])])


def session(target_tokens: int) -> dict[str, Any]:
    """A tool-using session of about ``target_tokens`` (our counter)."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing test."}]
    counter = AnthropicEstimator()
    i = 0
    body: dict[str, Any] = {"model": "m", "max_tokens": 100, "messages": messages}
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    body = session(100_000)
    edits = {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
    with_edits = {**body, "context_management": edits}
    counter = AnthropicEstimator()
    tokens = apply_context_management(body, counter).input_tokens
    raw_direct = json.dumps(body).encode()
    raw_gateway = json.dumps(with_edits).encode()
    step: list[float] = []
    for _ in range(args.rounds):
        parsed = json.loads(raw_gateway)
        start = time.perf_counter()
        apply_context_management(parsed, AnthropicEstimator())
        step.append(time.perf_counter() - start)
    trigger = {"edits": [{"type": "clear_tool_uses_20250919"}]}  # 100k trigger: counts all
    previous = {**body, "messages": body["messages"][:-2], "context_management": trigger}
    with_trigger = {**body, "context_management": trigger}
    cold: list[float] = []
    warm: list[float] = []
    for _ in range(max(args.rounds // 4, 3)):
        start = time.perf_counter()
        _ = apply_context_management(with_trigger, AnthropicEstimator()).input_tokens
        cold.append(time.perf_counter() - start)
        cache = CountCache()  # the session's previous request, counted before
        _ = apply_context_management(previous, counter, cache=cache).input_tokens
        start = time.perf_counter()
        _ = apply_context_management(with_trigger, counter, cache=cache).input_tokens
        warm.append(time.perf_counter() - start)
    headers = {"x-api-key": "k", "content-type": "application/json"}
    added: dict[str, list[float]] = {"emulated": [], "relayed": []}
    with (
        _serving(_upstream()) as upstream,
        _serving(create_app(GatewayConfig(upstream=upstream))) as emulating,
        _serving(
            create_app(GatewayConfig(upstream=upstream, pass_through_context_management=True))
        ) as relaying,
        httpx.Client(timeout=60) as client,
    ):
        routes = {"emulated": emulating, "relayed": relaying}

        def post(url: str, raw: bytes) -> float:
            start = time.perf_counter()
            client.post(f"{url}/v1/messages", content=raw, headers=headers).raise_for_status()
            return time.perf_counter() - start

        for _ in range(3):  # warm every path
            post(upstream, raw_direct)
            for url in routes.values():
                post(url, raw_gateway)
        for _ in range(args.rounds):
            for name, url in routes.items():
                direct = post(upstream, raw_direct)
                added[name].append(post(url, raw_gateway) - direct)
    ms = 1000
    print(f"request: {len(raw_gateway):,} bytes, {tokens:,} tokens ({counter.name})")
    print(f"rounds: {args.rounds}; target (issue 29): added p50 <= 1 ms, p99 <= 5 ms")
    for name, values in added.items():
        p50, p99 = statistics.median(values) * ms, _pct(values, 0.99) * ms
        print(f"added latency, {name}: p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    p50, p99 = statistics.median(step) * ms, _pct(step, 0.99) * ms
    print(f"the edit step alone (parse excluded): p50 {p50:.2f} ms, p99 {p99:.2f} ms")
    for name, values in (("cold", cold), ("warm", warm)):
        p50, p99 = statistics.median(values) * ms, _pct(values, 0.99) * ms
        print(f"edit step, input_tokens trigger, {name}: p50 {p50:.2f} ms, p99 {p99:.2f} ms")


if __name__ == "__main__":
    main()
