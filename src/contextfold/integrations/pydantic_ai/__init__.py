"""contextfold in Pydantic AI: ``Agent(..., capabilities=[ContextfoldHistory(...)])``.

Also a history processor (``capabilities=[ProcessHistory(history)]``). Needs
``pip install 'contextfold[pydantic-ai]'``.
"""

from ..._exceptions import MissingDependencyError as _Missing

try:
    import pydantic_ai.capabilities as _capabilities  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise _Missing("pydantic-ai", "pydantic-ai") from exc

from ._codec import PydanticAICodec
from ._history import ContextfoldHistory

__all__ = ["ContextfoldHistory", "PydanticAICodec"]
