"""contextfold in a LangChain v1 agent: ``middleware=[ContextfoldMiddleware(...)]``.

Needs ``pip install 'contextfold[langchain]'``.
"""

from ..._exceptions import MissingDependencyError as _Missing

try:
    import langchain.agents as _agents  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise _Missing("langchain", "langchain") from exc

from ._codec import LangChainCodec, tool_specs
from ._middleware import ContextfoldMiddleware

__all__ = ["ContextfoldMiddleware", "LangChainCodec", "tool_specs"]
