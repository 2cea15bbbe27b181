"""Fixtures: a scripted upstream and the gateway in front of it, both on loopback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

pytest.importorskip("starlette", reason="needs contextfold[gateway]")
pytest.importorskip("uvicorn", reason="needs contextfold[gateway]")

from contextfold.gateway import GatewayConfig, create_app

from .servers import ScriptedUpstream, serving

SECRET = "sk-ant-test-3f9c1e77a0b24d51"
"""The client's key in these tests: it must reach the upstream and nothing else."""


@pytest.fixture
def upstream() -> Iterator[ScriptedUpstream]:
    scripted = ScriptedUpstream()
    with serving(scripted.app()) as url:
        scripted.url = url
        yield scripted


GatewayFactory = Callable[..., str]


@pytest.fixture
def start_gateway(upstream: ScriptedUpstream) -> Iterator[GatewayFactory]:
    """Start a gateway in front of ``upstream`` with the given config fields; its URL."""
    with ExitStack() as stack:

        def start(**fields: object) -> str:
            config = GatewayConfig(upstream=upstream.url, **fields)  # type: ignore[arg-type]
            app = create_app(config)
            url = stack.enter_context(serving(app))
            start.app = app  # type: ignore[attr-defined]
            return url

        yield start


@pytest.fixture
def gateway(start_gateway: GatewayFactory) -> str:
    """A gateway emulating context management in front of the scripted upstream."""
    return start_gateway(timeout=5.0)
