"""Gateway figures: requests per second per core, and memory per idle conversation (issue 29).

Throughput: ``wrk`` (Debian's package; one thread, 16 keep-alive connections, 10 s) posts
a small ``/v1/messages`` request (one user message, 1 KB) to each path in turn: the
upstream directly, the trivial relay (uvicorn, Starlette, httpx: the floor of a Python
proxy on this stack), and the gateway in pass-through, emulating (the default; the
request asks for no edits, so its bytes are forwarded as sent) and transparent mode.
Each proxy runs in its own process pinned to CPU 0 (``taskset``); the upstream and wrk
share CPU 1. The figure per core is requests completed divided by the CPU seconds the
proxy's process used meanwhile (``/proc/PID/stat``), so other load on the machine lowers
the requests per second, not the requests per CPU second. ``--litellm PATH`` (LiteLLM's
``litellm`` command, in its own environment) adds the peer, LiteLLM's proxy on its
Anthropic pass-through route and on its ``/v1/messages`` route, one uvicorn worker each,
pinned and counted the same way (``_gateway_servers.litellm_serving``).

Memory: the gateway in transparent mode runs in this process (uvicorn in a thread, the
upstream in another process); ``--sessions`` conversations of 40 messages (about 12k
tokens, each its own content) send 3 turns each; then the traced heap (``tracemalloc``,
after a garbage collection) is compared with the heap after one warm-up conversation. The
shared message-count cache (``CountCache``, bounded, shared by every conversation) is
reported apart, by clearing it and measuring again.

    python -m benchmarks.gateway_throughput [--seconds 10] [--memory-only | --throughput-only]
        [--sessions 300] [--litellm PATH]

Needs the ``gateway`` extra and ``wrk`` (``apt-get install wrk``) for the throughput.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
import tracemalloc
from collections.abc import Sequence
from typing import Any

import httpx

from ._gateway_servers import KEY, MODEL, cpu_seconds, free_port, litellm_serving, serving

SMALL = {
    "model": MODEL,
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "Summarize the design of this module. " * 25}],
}


def _wrk(url: str, body: bytes, seconds: float) -> int:
    """Requests ``wrk`` completed against ``url`` in ``seconds`` (pinned to CPU 1)."""
    script = (
        'wrk.method = "POST"\n'
        f"wrk.body = {json.dumps(body.decode())}\n"
        'wrk.headers["content-type"] = "application/json"\n'
        f'wrk.headers["x-api-key"] = "{KEY}"\n'
        'wrk.headers["anthropic-version"] = "2023-06-01"\n'
    )
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    try:
        out = subprocess.run(
            [
                "taskset",
                "-c",
                "1",
                "wrk",
                "-t1",
                "-c16",
                f"-d{seconds:g}s",
                "-s",
                f.name,
                f"{url}/v1/messages",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    finally:
        os.unlink(f.name)
    match = re.search(r"(\d+) requests in", out)
    if match is None or "Non-2xx" in out or "Socket errors" in out:
        raise RuntimeError(f"wrk failed or saw errors:\n{out}")
    return int(match.group(1))


def throughput(seconds: float, litellm: str | None = None) -> None:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is needed: apt-get install wrk")
    body = json.dumps(SMALL).encode()
    print(f"request: {len(body):,} bytes; wrk -t1 -c16 -d{seconds:g}s; target >= 500/s per core")
    with serving("upstream", cpu=1) as (upstream, _):
        done = _wrk(upstream, body, seconds)
        print(f"direct (upstream alone): {done / seconds:,.0f} requests/s")
        proxies = {
            "trivial relay": ("relay", upstream),
            "gateway, pass-through": ("gateway", upstream, "--pass"),
            "gateway, emulating": ("gateway", upstream),
            "gateway, transparent": ("gateway", upstream, "--window", "200000"),
        }
        peers = {"LiteLLM, pass-through": "passthrough", "LiteLLM, /v1/messages": "unified"}
        running = {name: serving(*args, cpu=0) for name, args in proxies.items()}
        if litellm is not None:
            for name, mode in peers.items():
                running[name] = litellm_serving(litellm, upstream, mode, cpu=0)
        for name, server in running.items():
            with server as (url, pid):
                # One request first: transparent mode's first loads the token counter
                # (1.4 s here), which 16 requests waiting on it can push past wrk's 2 s.
                headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
                httpx.post(f"{url}/v1/messages", content=body, headers=headers, timeout=60)
                _wrk(url, body, 2)  # warm-up
                before = cpu_seconds(pid)
                done = _wrk(url, body, seconds)
                used = cpu_seconds(pid) - before
            print(
                f"{name}: {done / seconds:,.0f} requests/s, {used:.2f} CPU s used, "
                f"{done / used:,.0f} requests per CPU second"
            )


def _conversation(i: int, turn: int) -> dict[str, Any]:
    """Conversation ``i``'s request at ``turn``: 40 messages of its own, then more."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": f"Task {i}: fix the tests."}]
    for k in range(20 + turn):
        messages.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": f"t{i}_{k}", "name": "read", "input": {"k": k}}
                ],
            }
        )
        text = "\n".join(f"line {j} of file {k} in conversation {i}" for j in range(30))
        messages.append(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": f"t{i}_{k}", "content": text}],
            }
        )
    return {"model": MODEL, "max_tokens": 100, "messages": messages}


def memory(sessions: int) -> None:
    import uvicorn

    from contextfold.gateway import GatewayConfig, TransparentPolicy, create_app

    with serving("upstream") as (upstream, _):
        app = create_app(GatewayConfig(upstream=upstream), transparent=TransparentPolicy())
        port = free_port()
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.01)
        url = f"http://127.0.0.1:{port}/v1/messages"
        headers = {"x-api-key": KEY, "anthropic-version": "2023-06-01"}
        bodies = {
            (i, t): json.dumps(_conversation(i, t)).encode()
            for i in range(sessions + 1)
            for t in range(3)
        }
        size = sum(len(bodies[(i, 2)]) for i in range(sessions)) / sessions
        try:
            with httpx.Client(timeout=60) as client:

                def converse(i: int) -> None:
                    for t in range(3):
                        client.post(
                            url,
                            content=bodies[(i, t)],
                            headers={**headers, "x-contextfold-session": f"s{i}"},
                        ).raise_for_status()

                tracemalloc.start()
                converse(sessions)  # warm-up: imports, pools, first-use caches
                gc.collect()
                before = tracemalloc.get_traced_memory()[0]
                for i in range(sessions):
                    converse(i)
                gc.collect()
                after = tracemalloc.get_traced_memory()[0]
                app.state.gateway.counts._counts.clear()
                gc.collect()
                without = tracemalloc.get_traced_memory()[0]
                tracemalloc.stop()
        finally:
            server.should_exit = True
            thread.join(10)
    kb = 1024
    print(
        f"{sessions} conversations, 3 turns each, last request {size / kb:,.0f} KB (41+ messages)"
    )
    print(f"memory per idle conversation, all kept: {(after - before) / sessions / kb:.1f} KB")
    print(
        "  of which the shared message-count cache: "
        f"{(after - without) / sessions / kb:.1f} KB; "
        f"state, checkpoint and lock: {(without - before) / sessions / kb:.1f} KB"
    )


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--sessions", type=int, default=300)
    parser.add_argument("--memory-only", action="store_true")
    parser.add_argument("--throughput-only", action="store_true")
    parser.add_argument("--litellm", default=None, help="LiteLLM's `litellm` command: the peer")
    args = parser.parse_args(argv)
    if not args.memory_only:
        throughput(args.seconds, args.litellm)
    if not args.throughput_only:
        memory(args.sessions)


if __name__ == "__main__":
    main()
