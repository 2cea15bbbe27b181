"""Running the gateway with uvicorn (the ``contextfold serve`` command)."""

from __future__ import annotations

import contextlib
import gc
import socket
import sys
from collections.abc import Mapping
from importlib.util import find_spec
from typing import Literal, TypedDict

import uvicorn

from .._logging import logger
from ..workspace import SessionStore
from ._app import create_app
from ._config import GatewayConfig
from ._transparent import TransparentPolicy

__all__ = ["ServerStack", "serve", "server_stack", "settle_heap"]

_STARTUP_FAILURE = 3
"""uvicorn's exit status when the server could not start (``uvicorn.run``'s)."""


class ServerStack(TypedDict):
    """uvicorn's ``loop`` and ``http`` options."""

    loop: Literal["uvloop", "asyncio"]
    http: Literal["httptools", "h11"]


def server_stack() -> ServerStack:
    """uvicorn's event loop and HTTP parser: uvloop and httptools when installed (the
    ``gateway`` extra installs them), else the standard library's asyncio and h11.

    On a 230 KB request relayed on loopback the C pair took a trivial relay from 2.4 to
    1.6 ms of added latency at p50 and from 2.8 to 1.8 ms of CPU per request (448fea4,
    100 rounds of ``benchmarks.fig_gateway_latency`` at load 0.2-0.6). uvicorn's
    ``"auto"`` makes the same choice; naming it here lets :func:`serve` say which stack
    it runs on, and every server the gateway starts use the same one."""
    return {
        "loop": "uvloop" if find_spec("uvloop") is not None else "asyncio",
        "http": "httptools" if find_spec("httptools") is not None else "h11",
    }


def settle_heap() -> None:
    """Move every object alive now (the modules, the app) out of the garbage collector's
    view (``gc.freeze``), once, before serving.

    A full collection walks every tracked object; with the ~100k objects of the imported
    stack it took tens of milliseconds, about once per hundred 100k-token requests (each
    parses into thousands of objects), which is what the gateway's p99 latency was made
    of. Frozen objects are still freed by reference counting; only cycles among them
    stay. Done by :func:`serve`, the process's owner, not by :func:`create_app`, which
    may run inside someone else's process: before serving, and again once the server
    has started (:class:`_SettledServer`)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(_YOUNG_THRESHOLD, *gc.get_threshold()[1:])


_YOUNG_THRESHOLD = 10_000
"""Containers allocated (net of those freed) before a young collection: the default
700 started one or two in every emulated request, while its parsed body (a thousand
or more containers) was alive, each walking it and promoting it towards the full
collection (530 young, 47 middle and 4 full collections in 300 requests of the
229 KB body, about 0.1 ms a request); at 10,000, 3 young and no full ones. What
reference counting frees never counts; cyclic garbage waits at most that long."""


class _SettledServer(uvicorn.Server):
    """uvicorn's server, the heap settled again once it has started: the app's startup
    (the tokenizer, loaded then) and uvicorn's own start-up came after the first
    :func:`settle_heap`, and left 2,399 objects in the collector's view, which every
    full collection walked (``tests/gateway/test_gateway_cli.py`` counts them)."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        settle_heap()


def serve(
    config: GatewayConfig,
    *,
    host: str = "127.0.0.1",
    port: int = 8080,
    transparent: TransparentPolicy | Mapping[str, TransparentPolicy] | None = None,
    sessions: SessionStore | None = None,
) -> None:
    """Serve the gateway until interrupted (``transparent`` and ``sessions`` as in
    :func:`create_app`). Access logs are off: request lines carry no secrets, but the
    gateway keeps its promise of logging nothing a client sent."""
    app = create_app(config, transparent=transparent, sessions=sessions)
    stack = server_stack()
    logger.info("gateway: serving with %s and %s", stack["loop"], stack["http"])
    settle_heap()
    settings = uvicorn.Config(
        app, host=host, port=port, access_log=False, log_level="info", **stack
    )
    server = _SettledServer(settings)
    with contextlib.suppress(KeyboardInterrupt):  # as uvicorn.run
        server.run()
    if not server.started:
        sys.exit(_STARTUP_FAILURE)
