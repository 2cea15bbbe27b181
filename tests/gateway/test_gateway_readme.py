"""The README's ``contextfold serve`` example runs as written: the gateway with no upstream
starts the embedded model, and the answer reports the edit it applied."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .servers import free_port

README = Path(__file__).resolve().parents[2] / "README.md"
MARK = "<!-- run by tests/gateway/test_gateway_readme.py -->"


@pytest.mark.slow
def test_the_readme_serve_example_runs_and_reports_the_cleared_result(tmp_path: Path) -> None:
    pytest.importorskip("cyllama", reason="needs contextfold[local]")
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    (command,) = re.findall(re.escape(MARK) + r"\n```bash\n(.*?)```", README.read_text(), re.DOTALL)
    assert command.startswith(".venv/bin/contextfold serve --port 8080 &")
    port = str(free_port())
    # As written, but with this interpreter's own script and a free port.
    script = Path(sys.executable).parent / "contextfold"
    runnable = command.replace(".venv/bin/contextfold", str(script)).replace("8080", port)
    log = tmp_path / "out.txt"
    with log.open("w") as sink:  # a file: the server in the background keeps it open
        proc = subprocess.Popen(["bash", "-c", runnable], stdout=sink, start_new_session=True)
        try:
            proc.wait(timeout=120)
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
    last = log.read_text().strip().splitlines()[-1]
    answer = json.loads(last[last.index("{") :])
    assert answer["type"] == "message"
    assert answer["content"][0]["type"] == "text"
    (edit,) = answer["context_management"]["applied_edits"]
    assert edit["type"] == "clear_tool_uses_20250919"
    assert edit["cleared_tool_uses"] == 1
