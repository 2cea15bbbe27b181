"""A real agent CLI through the gateway: mini-swe-agent's ``mini`` (2.4.6, from PyPI; its
model calls go through litellm) against llama.cpp's server with the embedded model.

The model is constrained by a grammar to answer with one bash action per turn, and the
environment is scripted (every command prints the same 15-line failing-test log), so the
run is deterministic and nothing the model writes is executed. Direct, the agent's history
passes the server's 2,048-token context within a few calls and the run dies with a
context-window error; through the gateway in transparent mode it reaches its step limit.
(A server of its own, with half the other tests' context, and a log half as long cut the
prompt tokens the model reads, nearly all of this test's time on one CPU, from ~9,400 to
~4,600: 182 s to 82 s pinned to one CPU.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from contextfold.gateway import GatewayConfig, TransparentPolicy, create_app
from tests.llama_server_process import embedded_server

from .servers import serving

pytest.importorskip("minisweagent", reason="needs mini-swe-agent (installed by .ci/run)")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

STEPS = 6
N_CTX = 2048
GRAMMAR = (
    'root ::= "I will look at the failing tests.\\n\\n```mswea_bash_command\\n" cmd "\\n```"\n'
    "cmd ::= [a-z] [a-z]{0,7}\n"
)
HERE = Path(__file__).parent


def run_mini(base_url: str, tmp: Path, tag: str) -> tuple[dict[str, Any], list[str]]:
    """Run the ``mini`` CLI against ``base_url``; its trajectory and the commands run."""
    config = {
        "agent": {
            "system_template": "You are a helpful assistant that can interact with a computer.",
            "instance_template": (
                "Please solve this issue: {{task}}\n\nAnswer with one action in a "
                "```mswea_bash_command block per response."
            ),
            "step_limit": STEPS,
        },
        "model": {
            "model_class": "litellm_textbased",
            "model_name": "openai/smollm2",
            "cost_tracking": "ignore_errors",
            "model_kwargs": {
                "api_base": base_url,
                "api_key": "sk-local",
                "temperature": 0,
                "max_tokens": 32,
                "extra_body": {"grammar": GRAMMAR},
            },
        },
    }
    (tmp / f"{tag}.yaml").write_text(json.dumps(config))
    commands = tmp / f"{tag}-commands.jsonl"
    trajectory = tmp / f"{tag}.traj.json"
    env = {
        **os.environ,
        "MSWEA_CONFIGURED": "true",
        "MSWEA_GLOBAL_CONFIG_DIR": str(tmp / "mswea"),
        "MSWEA_SILENT_STARTUP": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no fetch of the price list at import
        "PYTHONPATH": str(HERE),
        "MSA_COMMANDS": str(commands),
        "NO_PROXY": "*",
    }
    mini = Path(sys.executable).parent / "mini"
    done = subprocess.run(
        [
            str(mini), "-y", "--exit-immediately",
            "--agent-class", "default",
            "--environment-class", "mini_swe_env.ScriptedEnvironment",
            "-c", "mini_textbased.yaml", "-c", str(tmp / f"{tag}.yaml"),
            "-t", "Find why the tests in tests/test_api.py fail and fix them.",
            "-o", str(trajectory),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )  # fmt: skip
    assert trajectory.exists(), done.stdout[-2000:] + done.stderr[-2000:]
    ran = (
        [json.loads(line) for line in commands.read_text().splitlines()]
        if commands.exists()
        else []
    )
    return json.loads(trajectory.read_text()), ran


@pytest.fixture(scope="module")
def small_llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """llama.cpp's server with the embedded model and an ``N_CTX``-token context."""
    yield from embedded_server(tmp_path_factory, "llama-small", n_ctx=N_CTX)


def prompt_sizes(trajectory: dict[str, Any]) -> list[int]:
    """The prompt tokens llama.cpp reported for each answered call."""
    return [
        m["extra"]["response"]["usage"]["prompt_tokens"]
        for m in trajectory["messages"]
        if m.get("role") == "assistant" and "response" in m.get("extra", {})
    ]


def test_mini_swe_agent_runs_to_its_step_limit_through_the_gateway_where_direct_overflows(
    small_llama_server: str, tmp_path: Path
) -> None:
    direct, direct_ran = run_mini(small_llama_server, tmp_path, "direct")
    assert direct["info"]["exit_status"] == "ContextWindowExceededError"
    assert len(direct_ran) < STEPS

    policy = TransparentPolicy(window=1_250, trigger=0.8, keep=0.25)
    upstream = small_llama_server.removesuffix("/v1")
    app = create_app(
        GatewayConfig(upstream=upstream, timeout=300),
        transparent={"/v1/chat/completions": policy},
    )
    with serving(app) as url:
        through, ran = run_mini(f"{url}/v1", tmp_path, "gateway")
        metrics = httpx.get(f"{url}/metrics").text
    assert through["info"]["exit_status"] == "LimitsExceeded", through["info"]
    assert len(ran) == STEPS
    sizes = prompt_sizes(through)
    assert len(sizes) == STEPS
    assert max(sizes) < N_CTX - 32
    # The agent's own history at the end is larger than the server's context: only the
    # gateway's compactions kept it running.
    assert sum(len(m["content"]) for m in through["messages"]) > 2 * N_CTX
    compactions = [
        line
        for line in metrics.splitlines()
        if line.startswith("contextfold_gateway_compactions_total ")
    ]
    assert compactions
    assert float(compactions[0].split()[1]) >= 1
    assert 'route="/v1/chat/completions",status="200"} ' + str(STEPS) in metrics
    assert 'kind="cancelled"' not in metrics
