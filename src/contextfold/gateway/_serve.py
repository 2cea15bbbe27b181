"""Running the gateway with uvicorn (the ``contextfold serve`` command)."""

from __future__ import annotations

import uvicorn

from ._app import create_app
from ._config import GatewayConfig

__all__ = ["serve"]


def serve(config: GatewayConfig, *, host: str = "127.0.0.1", port: int = 8080) -> None:
    """Serve the gateway until interrupted. Access logs are off: request lines carry no
    secrets, but the gateway keeps its promise of logging nothing a client sent."""
    uvicorn.run(create_app(config), host=host, port=port, access_log=False, log_level="info")
