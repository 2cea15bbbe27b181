"""Fixtures of the reliability suite: PostgreSQL comes from the workspace suite's fixture."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

_NAME = "reliability_workspace_conftest"
if _NAME not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        _NAME, Path(__file__).parents[1] / "workspace" / "conftest.py"
    )
    assert _spec
    assert _spec.loader
    _module = importlib.util.module_from_spec(_spec)
    sys.modules[_NAME] = _module
    _spec.loader.exec_module(_module)

# ``CONTEXTFOLD_TEST_PG_DSN``, or a throwaway server; skips when neither is available.
pg_dsn = sys.modules[_NAME].pg_dsn
