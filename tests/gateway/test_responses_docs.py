"""docs/GATEWAY.md's ``/v1/responses/compact`` example runs as written against a running
gateway, and its window continues the conversation."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import openai
import pytest

from .conftest import SECRET, GatewayFactory
from .servers import ScriptedUpstream
from .test_responses import response, summary_items, text_of

PAGE = Path(__file__).resolve().parents[2] / "docs" / "GATEWAY.md"
MARK = "<!-- run by tests/gateway/test_responses_docs.py -->"


def test_the_compact_example_runs_and_its_window_continues_the_conversation(
    start_gateway: GatewayFactory,
    upstream: ScriptedUpstream,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CONTEXTFOLD_GATEWAY_KEY_FILE", str(tmp_path / "gateway.key"))
    text = PAGE.read_text()
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
    assert answer["object"] == "response.compaction"
    *kept, item = answer["output"]
    assert [(m["role"], text_of(m)) for m in kept] == [
        ("user", "Fix the failing test in tests/test_app.py.")
    ]
    assert item["type"] == "compaction"
    assert item["encrypted_content"].startswith("cfc1.")
    assert upstream.received == []

    upstream.then_json(response("ok"))
    client = openai.OpenAI(base_url=f"{url}/v1", api_key=SECRET, max_retries=0)
    client.responses.create(
        model="gpt-5.5", input=[*answer["output"], {"role": "user", "content": "Go on."}]
    )
    (summary,) = summary_items(upstream.received[0].json()["input"])
    assert "tests/test_app.py" in text_of(summary)
