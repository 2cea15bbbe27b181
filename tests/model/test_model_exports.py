"""The public names of ``contextfold.model`` and which of them load lazily."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import contextfold.model


def test_kv_cache_stats_is_exported_next_to_local_chat_model() -> None:
    from contextfold.model._local_kvcache import KVCacheStats

    assert "KVCacheStats" in contextfold.model.__all__
    assert contextfold.model.KVCacheStats is KVCacheStats


def test_importing_the_package_loads_no_adapter_module() -> None:
    code = (
        "import sys, contextfold.model\n"
        "print(sorted(m for m in sys.modules if m.startswith('contextfold.model._') "
        "and m.rsplit('.', 1)[1] in ('_local', '_openai', '_anthropic')))"
    )
    src = str(Path(contextfold.model.__file__).parents[2])
    env = os.environ | {"PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "[]"
