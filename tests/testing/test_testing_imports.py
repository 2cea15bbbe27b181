"""``contextfold.testing`` imports without pytest; only ``WorkspaceContract`` needs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from contextfold import MissingDependencyError

WITHOUT_PYTEST = """
import sys
for name in ("pytest", "pytest_asyncio", "hypothesis"):
    sys.modules[name] = None  # as if not installed
from contextfold.testing import (
    MemoryWorkspace, ScriptedModel, check_requests_valid, text_reply, tool_reply,
)
model = ScriptedModel([tool_reply(("t", {})), "done"])
check_requests_valid([])
print("ok")
"""


def test_the_test_doubles_import_without_pytest() -> None:
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PYTEST], capture_output=True, text=True, timeout=120
    )
    assert (done.returncode, done.stdout.strip()) == (0, "ok"), done.stderr


def test_workspace_contract_without_pytest_names_the_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import contextfold.testing as testing

    monkeypatch.delitem(sys.modules, "contextfold.testing._workspace", raising=False)
    monkeypatch.setitem(sys.modules, "pytest", None)
    with pytest.raises(MissingDependencyError, match=r"contextfold\[testing\]"):
        testing.WorkspaceContract  # noqa: B018
