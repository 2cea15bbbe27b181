"""The peer row of the gateway cost figure: LiteLLM's proxy in front of the same recording
upstream, configured for a client that asks for no context management.

LiteLLM does context management on ``/v1/messages`` in two ways
(``../shared/research/gateways.md`` section 3.1):

- its ``context_management`` polyfill acts only on the edits a request asks for; Claude
  Code asks only for ``clear_thinking_20251015`` with ``keep: "all"``, which LiteLLM does
  not polyfill (its dispatcher skips the type), so for this workload it does nothing;
- its prompt compression (the ``compression_interception`` callback, documented at
  https://docs.litellm.ai/docs/completion/prompt_compression, "proxy" section) is what it
  offers a client that asks for nothing: above ``compression_trigger`` tokens it stubs
  low-relevance messages and adds a ``litellm_content_retrieve`` tool. This is the row.

The proxy runs from its own virtual environment (``pip install 'litellm[proxy]'``; the
library never depends on it), found with ``--litellm PATH`` (the ``litellm`` command).
The trigger is set where the gateway's is (``trigger`` x ``window``), the target left at
LiteLLM's default (70% of the trigger).
"""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ._gateway_servers import litellm_proxy, serving_in_thread

__all__ = ["LITELLM_DOCS", "litellm_version", "through_litellm"]

LITELLM_DOCS = "https://docs.litellm.ai/docs/completion/prompt_compression"
MODEL = "claude-sonnet-4-5"


def _config(upstream: str, trigger: int, master_key: str) -> dict[str, Any]:
    """The proxy's configuration: compression interception on, per its documentation."""
    return {
        "general_settings": {"master_key": master_key},
        "model_list": [
            {
                "model_name": MODEL,
                "litellm_params": {
                    "model": f"anthropic/{MODEL}",
                    "api_base": upstream,
                    "api_key": "sk-ant-replay",
                },
            }
        ],
        "litellm_settings": {
            "callbacks": ["compression_interception"],
            "compression_interception_params": {
                "enabled": True,
                "compression_trigger": trigger,
            },
        },
    }


def litellm_version(command: str) -> str:
    """The installed LiteLLM's version, read from the environment that holds ``command``."""
    python = Path(command).with_name("python")
    out = subprocess.run(
        [str(python), "-c", "import importlib.metadata as m; print(m.version('litellm'))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return out.stdout.strip()


def through_litellm(
    command: str,
    sessions: Sequence[tuple[str, Sequence[dict[str, Any]], Sequence[dict[str, Any]]]],
    trigger: int,
) -> list[list[list[dict[str, Any]]]]:
    """What the upstream received for each call of each ``(name, bodies, answers)``
    session sent through one LiteLLM proxy: a list per call, as LiteLLM may send more
    than one request for a call (a retrieval loop) or none."""
    received: list[list[list[dict[str, Any]]]] = [[[] for _ in b] for _, b, _ in sessions]
    current = [0, 0]  # session, call

    async def messages(request: Request) -> Response:
        s, i = current
        received[s][i].append(json.loads(await request.body()))
        return JSONResponse(sessions[s][2][i])

    upstream_app = Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])
    key = "sk-" + secrets.token_hex(16)  # the proxy refuses to start without one
    with (
        serving_in_thread(upstream_app) as upstream,
        litellm_proxy(command, _config(upstream, trigger, key), start_timeout=180) as (proxy, _),
        httpx.Client(base_url=proxy, timeout=300) as client,
    ):
        for s, (name, bodies, _) in enumerate(sessions):
            for i, body in enumerate(bodies):
                current[:] = [s, i]
                reply = client.post(
                    "/v1/messages",
                    content=json.dumps(body, ensure_ascii=False).encode(),
                    headers={
                        "content-type": "application/json",
                        "anthropic-version": "2023-06-01",
                        "x-api-key": key,
                        "x-claude-code-session-id": name,
                    },
                )
                if reply.status_code != 200:
                    raise RuntimeError(
                        f"LiteLLM answered {name} call {i} with {reply.status_code}: "
                        f"{reply.text[:500]}"
                    )
    return received
