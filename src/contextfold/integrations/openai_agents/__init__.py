"""contextfold in the OpenAI Agents SDK, as ``RunConfig(call_model_input_filter=...)``.

Needs ``pip install 'contextfold[openai-agents]'``.
"""

from ..._exceptions import MissingDependencyError as _Missing

try:
    import agents.run_config as _run_config  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised without the extra
    raise _Missing("openai-agents", "openai-agents") from exc

from ._codec import BLANK_SCREENSHOT, ITEM_TAG, AgentsCodec
from ._filter import ContextfoldInputFilter

__all__ = ["BLANK_SCREENSHOT", "ITEM_TAG", "AgentsCodec", "ContextfoldInputFilter"]
