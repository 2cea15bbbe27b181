"""ContextfoldMiddleware: the engine before every model call of a LangChain agent."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Unpack

from langchain.agents.middleware import (
    AgentMiddleware,
    ExtendedModelResponse,
    ModelRequest,
    ModelResponse,
)
from langchain_core.messages import AnyMessage, RemoveMessage
from langchain_core.tools import BaseTool, StructuredTool
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from langgraph.prebuilt import ToolRuntime
from langgraph.types import Command

from .._options import EngineOptions, Sessions, readback_reader
from .._readback import bound_readback
from ._codec import LangChainCodec, tool_specs

__all__ = ["ContextfoldMiddleware"]


class ContextfoldMiddleware(AgentMiddleware):  # type: ignore[type-arg]
    """Keeps a ``create_agent`` loop in its window with contextfold's engine.

    Before every model call the new messages of the state go to the engine (tool results
    over ``tool_result_limit`` are cut and offloaded), the engine compresses when the
    request (system prompt and tools included) is over the trigger, and the model gets
    the result. When anything changed, the state is rewritten to match: the summary as
    one ``HumanMessage``, the kept messages after it, whole tool-call pairs only, so
    LangGraph's state stays a valid conversation and the offloaded references are in it.
    With a workspace as offloader the agent also gets ``Read``, ``Grep`` and ``Glob``,
    which see only the items of the thread they are called in. One engine per LangGraph
    thread (``thread_id``), made on first use; a run without a thread (no checkpointer)
    is the conversation ``"default"``. Takes the
    :class:`~contextfold.integrations.EngineOptions` (``counter``, ``context_size``,
    ``summarizer``, ``offloader``, ``config``, ...).

    Asynchronous only (``ainvoke``/``astream``): the engine is async.
    """

    def __init__(self, **options: Unpack[EngineOptions]) -> None:
        super().__init__()
        self.sessions: Sessions[AnyMessage] = Sessions(
            options, LangChainCodec(), rewrites_history=True
        )
        reader = readback_reader(options)
        functions = (
            bound_readback(
                reader,
                options.get("config"),
                context=("runtime", ToolRuntime),
                session_of=_thread_of,
                why="no LangGraph runtime was given to the tool",
            )
            if reader is not None
            else []
        )
        self.tools: list[BaseTool] = [
            StructuredTool.from_function(coroutine=f, name=f.__name__, parse_docstring=True)
            for f in functions
        ]

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResponse[Any] | ExtendedModelResponse[Any]:
        """Fold the request's messages, call the model, and rewrite the state if needed."""
        folder = self.sessions.get(_thread_of(request.runtime) or "default")
        system = request.system_message.text if request.system_message is not None else ""
        folded = await folder.fold(request.messages, system, tool_specs(request.tools))
        response = await handler(request.override(messages=folded.request))
        if not folded.changed:
            return response
        update = [RemoveMessage(id=REMOVE_ALL_MESSAGES), *folded.history, *response.result]
        return ExtendedModelResponse(
            model_response=response, command=Command(update={"messages": update})
        )


def _thread_of(runtime: object) -> str | None:
    """The conversation of a model call (its ``Runtime``) or a tool call (its
    ``ToolRuntime``): the LangGraph thread, ``"default"`` in a run without one, ``None``
    when there is no runtime at all (a tool called outside the graph)."""
    if runtime is None:
        return None
    thread = getattr(getattr(runtime, "execution_info", None), "thread_id", None)
    return thread if isinstance(thread, str) and thread else "default"
