"""docs/GATEWAY.md's curl example runs as written against a running gateway."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from .conftest import GatewayFactory

PAGE = Path(__file__).resolve().parents[2] / "docs" / "GATEWAY.md"
MARK = "<!-- run by tests/gateway/test_gateway_docs.py -->"


def test_the_count_tokens_example_runs_and_shows_what_the_edit_cleared(
    start_gateway: GatewayFactory,
) -> None:
    text = PAGE.read_text()
    assert MARK in text
    (command,) = re.findall(re.escape(MARK) + r"\n```bash\n(.*?)```", text, re.DOTALL)
    assert "http://127.0.0.1:8080" in command
    if subprocess.run(["which", "curl"], capture_output=True).returncode != 0:
        pytest.skip("curl is not installed")
    url = start_gateway()
    done = subprocess.run(
        ["bash", "-c", command.replace("http://127.0.0.1:8080", url)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    answer = json.loads(done.stdout)
    assert set(answer) == {"input_tokens", "context_management"}
    assert answer["input_tokens"] < answer["context_management"]["original_input_tokens"]
