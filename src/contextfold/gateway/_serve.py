"""Running the gateway with uvicorn (the ``contextfold serve`` command)."""

from __future__ import annotations

from collections.abc import Mapping

import uvicorn

from ..workspace import SessionStore
from ._app import create_app
from ._config import GatewayConfig
from ._transparent import TransparentPolicy

__all__ = ["serve"]


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
    uvicorn.run(app, host=host, port=port, access_log=False, log_level="info")
