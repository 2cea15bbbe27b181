"""The processes the gateway's performance figures run: a fast upstream, a trivial relay,
and the gateway in each mode, each in a process of its own (no shared GIL with the
client), started and stopped by :func:`serving`.

    python -m benchmarks._gateway_servers upstream PORT [--delay-ms D]
    python -m benchmarks._gateway_servers relay PORT UPSTREAM
    python -m benchmarks._gateway_servers gateway PORT UPSTREAM [--pass] [--window N]
    python -m benchmarks._gateway_servers floor|bare-raw|bare-client|bare-httpx PORT UPSTREAM
    (relay and gateway take --profile FILE: cProfile the process until it is stopped, and
    --plain-stack: uvicorn on asyncio and h11 even where uvloop and httptools are installed)

The upstream is a plain asyncio HTTP/1.1 server (keep-alive, no framework), so it costs
little next to what is measured: it answers ``/v1/messages`` with a short message, or,
when the body asks for ``"stream": true``, with the first SSE event at once and the rest
``--delay-ms`` later. The relay is the trivial proxy a gateway is compared with: the
same server stack as the gateway (uvicorn, Starlette, httpx), reading the body and
sending its bytes on, streaming the answer back, on the same uvicorn stack as the
gateway (uvloop and httptools when installed, as uvicorn picks them). The gateway runs as
``contextfold serve`` runs it (:func:`contextfold.gateway.serve`).

The floors (``fig_gateway_latency --floors``) split the hop's cost: ``floor``, a bare
asyncio proxy on uvloop (a request read by its length, written upstream on one kept
connection, the answer read by its length and written back: no HTTP library); then
uvicorn on the gateway's stack with a bare ASGI app (no Starlette) whose upstream is the
same raw writes (``bare-raw``), the gateway's upstream client (``bare-client``) or a
plain ``httpx.AsyncClient`` (``bare-httpx``). They answer every request with a
content-length; a streamed answer is beyond them.

The peer is LiteLLM's proxy (:func:`litellm_serving`), from its own virtual environment
(``pip install 'litellm[proxy]'``; the library never depends on it), configured as its
documentation recommends, in one of its two ways of fronting an Anthropic upstream:

- ``passthrough``: its Anthropic pass-through route, ``/anthropic/v1/messages``, the
  upstream given as ``ANTHROPIC_API_BASE`` ("call provider-specific endpoint, in native
  format (no translation)", https://docs.litellm.ai/docs/pass_through/anthropic_completion);
- ``unified``: its ``/v1/messages`` route with the model in ``model_list``
  (``anthropic/<model>`` with ``api_base``: https://docs.litellm.ai/docs/anthropic_unified),
  which parses the request and routes it (the path a gateway that transforms takes).

Both with the production checklist's settings (https://docs.litellm.ai/docs/proxy/prod:
a master key, one uvicorn worker per process, ``set_verbose: False``), no database, and
``LITELLM_LOG=ERROR`` (the gateway and the relay write no access log either). The
requests of every path name a model LiteLLM's price map knows (:data:`MODEL`) and carry
its master key (:data:`KEY`): with an unknown model its pass-through logging fails on
every answer, a cost of the benchmark, not of the proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

MODEL = "claude-sonnet-4-5"
"""The model every benchmark request names, and the upstream's answers."""
KEY = "sk-bench-5f1c0a9e73d24b86"
"""The key every benchmark request carries: LiteLLM's master key (the others ignore it)."""

ANSWER = json.dumps(
    {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
).encode()

_EVENTS = [
    ("message_start", {"type": "message_start", "message": {**json.loads(ANSWER), "content": []}}),
    (
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ),
    (
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}},
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 1},
        },
    ),
    ("message_stop", {"type": "message_stop"}),
]


def _event(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _upstream(port: int, delay: float) -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                _, body = await _read_message(reader)
                if b'"stream":true' in body or b'"stream": true' in body:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                        b"transfer-encoding: chunked\r\n\r\n" + _chunk(_event(*_EVENTS[0]))
                    )
                    await writer.drain()
                    await asyncio.sleep(delay)
                    rest = b"".join(_event(*e) for e in _EVENTS[1:])
                    writer.write(_chunk(rest) + b"0\r\n\r\n")
                else:
                    writer.write(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                        b"content-length: %d\r\n\r\n%s" % (len(ANSWER), ANSWER)
                    )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def _relay_app(upstream: str) -> Any:
    import httpx
    from starlette.applications import Starlette
    from starlette.background import BackgroundTask
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    client = httpx.AsyncClient(base_url=upstream, timeout=60)
    skip = {"host", "content-length", "connection", "accept-encoding"}

    async def relay(request: Request) -> Response:
        body = await request.body()
        headers = [(k, v) for k, v in request.headers.items() if k not in skip]
        sent = client.build_request(request.method, request.url.path, headers=headers, content=body)
        answer = await client.send(sent, stream=True)
        kept = {
            k: v
            for k, v in answer.headers.items()
            if k not in ("content-length", "transfer-encoding", "connection")
        }
        return StreamingResponse(
            answer.aiter_raw(),
            status_code=answer.status_code,
            headers=kept,
            background=BackgroundTask(answer.aclose),
        )

    return Starlette(routes=[Route("/v1/{path:path}", relay, methods=["GET", "POST"])])


async def _read_message(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """A head and a body framed by its ``content-length`` (the only framing the upstream
    and the floors read)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    return head, await reader.readexactly(length) if length else b""


async def _floor_proxy(port: int, upstream_port: int) -> None:
    """The least a Python hop can cost: bytes in, bytes on, no HTTP library."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", upstream_port)
        try:
            while True:
                head, body = await _read_message(reader)
                up_writer.write(head + body)
                answer_head, answer = await _read_message(up_reader)
                writer.write(answer_head + answer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            up_writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def _bare_app(upstream: str, client: str) -> Any:
    """A bare ASGI app relaying ``/v1/...`` through ``client``: ``raw`` writes on one
    kept connection, ``gateway`` the gateway's upstream client, ``httpx`` httpx's."""
    import httpx

    from contextfold.gateway import GatewayConfig
    from contextfold.gateway._metrics import Metrics
    from contextfold.gateway._upstream import Upstream

    port = int(upstream.rsplit(":", 1)[1])
    state: dict[str, Any] = {}

    async def body_of(receive: Any) -> bytes:
        parts = []
        while True:
            message = await receive()
            parts.append(message.get("body", b""))
            if not message.get("more_body"):
                return b"".join(parts)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = await body_of(receive)
        headers = [(k, v) for k, v in scope["headers"] if k not in (b"host", b"content-length")]
        if client == "raw":
            if "lock" not in state:
                state["lock"] = asyncio.Lock()
            async with state["lock"]:
                if "conn" not in state:
                    state["conn"] = await asyncio.open_connection("127.0.0.1", port)
                reader, writer = state["conn"]
                head = b"POST %s HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: %d\r\n" % (
                    scope["path"].encode(),
                    len(body),
                )
                lines = b"".join(k + b": " + v + b"\r\n" for k, v in headers)
                writer.write(head + lines + b"\r\n" + body)
                _, answer = await _read_message(reader)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-length", b"%d" % len(answer))],
                }
            )
            await send({"type": "http.response.body", "body": answer})
            return
        if client == "gateway":
            if "upstream" not in state:
                state["upstream"] = Upstream(GatewayConfig(upstream=upstream), Metrics())
            named = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]
            opened = await state["upstream"].open(
                "POST", scope["path"], query="", headers=named, body=body
            )
        else:
            if "httpx" not in state:
                state["httpx"] = httpx.AsyncClient(base_url=upstream, timeout=60)
            sent = state["httpx"].build_request(
                "POST", scope["path"], content=body, headers=headers
            )
            opened = await state["httpx"].send(sent, stream=True)
        length = opened.headers["content-length"].encode()
        await send(
            {
                "type": "http.response.start",
                "status": opened.status_code,
                "headers": [(b"content-length", length)],
            }
        )
        # The gateway's answer is its own type, the body as received (decoded only when
        # the upstream sent a content-encoding, which this one does not).
        parts = opened.aiter_bytes() if client == "gateway" else opened.aiter_raw()
        async for part in parts:
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        await opened.aclose()

    return app


def _gateway_options(upstream: str, passing: bool, window: int | None) -> dict[str, Any]:
    from contextfold.gateway import GatewayConfig, TransparentPolicy

    config = GatewayConfig(upstream=upstream, pass_through_context_management=passing or None)
    return {"config": config, "transparent": TransparentPolicy(window=window) if window else None}


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "kind",
        choices=["upstream", "relay", "gateway", "floor", "bare-raw", "bare-client", "bare-httpx"],
    )
    parser.add_argument("port", type=int)
    parser.add_argument("upstream", nargs="?")
    parser.add_argument("--delay-ms", type=float, default=5.0)
    parser.add_argument("--pass", dest="passing", action="store_true")
    parser.add_argument("--window", type=int, default=None)
    parser.add_argument("--profile", default=None, help="cProfile the proxy into this file")
    parser.add_argument(
        "--plain-stack", action="store_true", help="uvicorn on asyncio and h11, not uvloop"
    )
    args = parser.parse_args(argv)
    if args.kind == "upstream":
        asyncio.run(_upstream(args.port, args.delay_ms / 1000))
        return
    if args.kind == "floor":
        import uvloop

        uvloop.run(_floor_proxy(args.port, int(args.upstream.rsplit(":", 1)[1])))
        return
    import uvicorn

    if args.kind.startswith("bare-"):
        uvicorn.run(
            _bare_app(args.upstream, args.kind.split("-", 1)[1].replace("client", "gateway")),
            host="127.0.0.1",
            port=args.port,
            log_level="warning",
            access_log=False,
        )
        return
    if args.kind == "relay":
        app = _relay_app(args.upstream)
    else:
        from contextfold.gateway import create_app, serve

        options = _gateway_options(args.upstream, args.passing, args.window)
        if args.profile is None and not args.plain_stack:  # as `contextfold serve` runs it
            serve(options.pop("config"), port=args.port, **options)
            return
        app = create_app(options.pop("config"), **options)
    stack: dict[str, Any] = {"loop": "asyncio", "http": "h11"} if args.plain_stack else {}
    if args.profile is None:
        if args.kind == "gateway":
            import gc

            gc.collect()
            gc.freeze()  # as `serve` does
        uvicorn.run(
            app,
            host="127.0.0.1",
            port=args.port,
            log_level="warning",
            access_log=False,
            **stack,
        )
        return
    import contextlib
    import cProfile
    import signal

    server = uvicorn.Server(
        uvicorn.Config(
            app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False, **stack
        )
    )
    # uvicorn re-raises SIGTERM after its shutdown, which would end the process before the
    # profile is written: this process stops the server itself instead.
    server.capture_signals = contextlib.nullcontext  # type: ignore[method-assign]
    signal.signal(signal.SIGTERM, lambda *_: setattr(server, "should_exit", True))
    if args.kind == "gateway":
        import gc

        gc.collect()
        gc.freeze()  # as `serve` does
    profile = cProfile.Profile()
    profile.enable()
    try:
        server.run()
    finally:
        profile.disable()
        profile.dump_stats(args.profile)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def serving_in_thread(app: Any, *, lifespan: str = "auto") -> Iterator[str]:
    """``app`` served by uvicorn in a daemon thread of this process on a loopback port;
    yields its base URL, stops it on exit."""
    import threading

    import uvicorn

    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", lifespan=lifespan
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError(f"the in-thread server on {port} did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


def _wait(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server on {port} exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"server on {port} did not start")


@contextmanager
def serving(*args: str, cpu: int | None = None) -> Iterator[tuple[str, int]]:
    """Run ``python -m benchmarks._gateway_servers KIND PORT ...`` (pinned to ``cpu`` if
    given); yields its base URL and process id."""
    port = free_port()
    command = [sys.executable, "-m", "benchmarks._gateway_servers", args[0], str(port), *args[1:]]
    if cpu is not None:
        command = ["taskset", "-c", str(cpu), *command]
    proc = subprocess.Popen(command, env=os.environ.copy())
    try:
        _wait(port, proc)
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


LITELLM_ROUTES = {"passthrough": "/anthropic", "unified": ""}
"""Where each way of running LiteLLM takes ``/v1/messages``: the prefix of its route."""


def _litellm_config(upstream: str) -> dict[str, Any]:
    """LiteLLM's configuration, as the production checklist has it."""
    return {
        "general_settings": {"master_key": KEY},
        "model_list": [
            {
                "model_name": MODEL,
                "litellm_params": {
                    "model": f"anthropic/{MODEL}",
                    "api_base": upstream,
                    "api_key": "sk-ant-bench",
                },
            }
        ],
        "litellm_settings": {"set_verbose": False, "request_timeout": 600},
    }


@contextmanager
def litellm_proxy(
    command: str,
    config: dict[str, Any],
    *,
    env: dict[str, str] | None = None,
    extra_args: Sequence[str] = (),
    cpu: int | None = None,
    start_timeout: float = 240,
) -> Iterator[tuple[str, int]]:
    """LiteLLM's proxy (the ``litellm`` command ``command``) on a loopback port with
    ``config`` as its ``config.yaml`` (JSON is YAML), pinned to ``cpu`` if given; yields
    its base URL and process id, stopped by that id on exit. The errors it logged are
    printed when it stops: a peer that failed quietly would flatter it."""
    import tempfile
    from pathlib import Path

    import httpx

    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        config_path = Path(tmp) / "config.yaml"
        config_path.write_text(json.dumps(config, indent=2), encoding="utf-8")
        full_env = {
            **os.environ,
            "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no download of the price map
            "LITELLM_TELEMETRY": "False",
            **(env or {}),
        }
        args = ["--config", str(config_path), "--host", "127.0.0.1", "--port", str(port)]
        command_line = [command, *args, *extra_args]
        if cpu is not None:
            command_line = ["taskset", "-c", str(cpu), *command_line]
        log_path = Path(tmp) / "proxy.log"
        with log_path.open("w") as log:
            proc = subprocess.Popen(
                command_line, stdout=log, stderr=subprocess.STDOUT, env=full_env
            )
            try:
                base = f"http://127.0.0.1:{port}"
                deadline = time.monotonic() + start_timeout
                while True:
                    if proc.poll() is not None:
                        raise RuntimeError("LiteLLM exited: " + log_path.read_text()[-2000:])
                    try:
                        if httpx.get(f"{base}/health/liveliness", timeout=2).status_code == 200:
                            break
                    except httpx.HTTPError:
                        pass
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"LiteLLM's proxy did not start in {start_timeout} s")
                    time.sleep(0.5)
                yield base, proc.pid
            finally:
                proc.terminate()
                try:
                    proc.wait(20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                errors = [line for line in log_path.read_text().splitlines() if "ERROR" in line]
                if errors:
                    print(f"LiteLLM logged {len(errors)} errors, first: {errors[0]}")


@contextmanager
def litellm_serving(
    command: str, upstream: str, mode: str, cpu: int | None = None
) -> Iterator[tuple[str, int]]:
    """LiteLLM's proxy in front of ``upstream``, one uvicorn worker (pinned to ``cpu`` if
    given); yields the base URL of its ``mode`` route (:data:`LITELLM_ROUTES`) and its
    process id."""
    env = {
        "ANTHROPIC_API_BASE": upstream,  # the pass-through route's upstream
        "ANTHROPIC_API_KEY": "sk-ant-bench",
        "LITELLM_LOG": "ERROR",
    }
    with litellm_proxy(
        command, _litellm_config(upstream), env=env, extra_args=("--num_workers", "1"), cpu=cpu
    ) as (base, pid):
        yield base + LITELLM_ROUTES[mode], pid


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process ``pid`` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks


if __name__ == "__main__":
    main()
