"""Running the gateway with uvicorn (the ``contextfold serve`` command)."""

from __future__ import annotations

import gc
from collections.abc import Mapping

import uvicorn

from ..workspace import SessionStore
from ._app import create_app
from ._config import GatewayConfig
from ._transparent import TransparentPolicy

__all__ = ["serve", "settle_heap"]


def settle_heap() -> None:
    """Move every object alive now (the modules, the app) out of the garbage collector's
    view (``gc.freeze``), once, before serving.

    A full collection walks every tracked object; with the ~100k objects of the imported
    stack it took tens of milliseconds, about once per hundred 100k-token requests (each
    parses into thousands of objects), which is what the gateway's p99 latency was made
    of. Frozen objects are still freed by reference counting; only cycles among them
    stay. Done by :func:`serve`, the process's owner, not by :func:`create_app`, which
    may run inside someone else's process."""
    gc.collect()
    gc.freeze()


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
    settle_heap()
    uvicorn.run(app, host=host, port=port, access_log=False, log_level="info")
