"""Helpers for the token tests: the reference tokenizer and real text from recorded runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from contextfold.token import tiktoken_encoding

SWEBENCH = Path(__file__).parents[2] / "data" / "trajectories" / "swebench-verified-gemini3pro"


def reference_count(encoding: str, text: str) -> int:
    """tiktoken, the reference: special-token strings count as text, as the API does."""
    return len(tiktoken_encoding(encoding).encode(text, disallowed_special=()))


def swebench_texts(limit_files: int = 3) -> list[str]:
    """Message contents of a few recorded SWE-bench runs (code, diffs, logs)."""
    texts: list[str] = []
    for path in sorted(SWEBENCH.glob("*.traj.json"))[:limit_files]:
        data: dict[str, Any] = json.loads(path.read_text())
        for message in data["messages"]:
            content = message.get("content")
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                texts.extend(str(part.get("text", "")) for part in content)
    return texts
