"""contextfold inside other agent frameworks, and in the tracing teams already run.

Each integration is a subpackage that needs its extra and says which when it is missing:

* ``contextfold.integrations.langchain``: ``ContextfoldMiddleware`` for LangChain v1's
  ``create_agent`` (``contextfold[langchain]``);
* ``contextfold.integrations.openai_agents``: a ``call_model_input_filter`` and read-back
  ``function_tool``s for the OpenAI Agents SDK (``contextfold[openai-agents]``);
* ``contextfold.integrations.pydantic_ai``: a history processor for Pydantic AI
  (``contextfold[pydantic-ai]``);
* ``contextfold.integrations.otel``: OpenTelemetry spans for the agent and the engine
  (``contextfold[otel]``).

What they share is here and needs nothing extra: :class:`HistoryFolder` runs the engine
behind a framework's own history through a small :class:`Codec`.
"""

from ._folder import Codec, Folded, HistoryFolder, mark_readback
from ._options import EngineOptions, Sessions, readback_functions

__all__ = [
    "Codec",
    "EngineOptions",
    "Folded",
    "HistoryFolder",
    "Sessions",
    "mark_readback",
    "readback_functions",
]
