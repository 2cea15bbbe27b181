"""A scripted environment for mini-swe-agent (imported by the ``mini`` CLI in a subprocess,
by its ``--environment-class`` option): every command "runs" and prints the same failing
test log, so the agent's history grows by a known amount per step and nothing the model
writes is executed on the test machine."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

LOG = "".join(
    f"FAILED tests/test_api.py::test_timeout_{i} - AssertionError: expected 30, got {i}\n"
    for i in range(15)
)


class ScriptedEnvironment:
    """mini-swe-agent's ``Environment`` protocol; each command is appended to the file
    named by ``MSA_COMMANDS`` (one JSON string per line)."""

    def __init__(self, **kwargs: Any) -> None:
        self.config = kwargs
        self.commands = Path(os.environ["MSA_COMMANDS"])

    def execute(self, action: dict[str, Any], cwd: str = "", **_: Any) -> dict[str, Any]:
        with self.commands.open("a") as out:
            out.write(json.dumps(action.get("command", "")) + "\n")
        return {"output": LOG, "returncode": 1, "exception_info": ""}

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        return {"system": "Linux", "release": "6", "version": "1", "machine": "x86_64", **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {"info": {"config": {"environment_type": "scripted"}}}
