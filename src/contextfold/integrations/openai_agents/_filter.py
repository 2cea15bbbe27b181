"""ContextfoldInputFilter: the engine as the Agents SDK's ``call_model_input_filter``."""

from __future__ import annotations

from typing import Any, Unpack

from agents import FunctionTool, function_tool
from agents.run_config import CallModelData, ModelInputData
from agents.tool_context import ToolContext

from ...message import ToolSpec
from .._options import EngineOptions, Sessions, readback_reader
from .._readback import bound_readback
from ._codec import AgentsCodec, Item

__all__ = ["ContextfoldInputFilter"]


class ContextfoldInputFilter:
    """``RunConfig(call_model_input_filter=...)`` that keeps every model call in the window.

    The SDK keeps the whole run's items and calls the filter before each model call; the
    filter feeds the engine the new items (tool outputs over ``tool_result_limit`` are
    cut and offloaded), compresses when the request (instructions and tools included) is
    over the trigger, and returns the summary and kept items. :attr:`tools` are ``Read``,
    ``Grep`` and ``Glob`` as ``function_tool``s: add them to the agent. One conversation
    per filter (``session_id``, also the offload session: make one filter per SDK
    session); its tools see only that session's items, and refuse a run whose
    ``RunConfig`` folds another session. Takes the
    :class:`~contextfold.integrations.EngineOptions`.
    """

    def __init__(self, *, session_id: str = "default", **options: Unpack[EngineOptions]) -> None:
        self.session_id = session_id
        self.sessions: Sessions[Item] = Sessions(options, AgentsCodec(), rewrites_history=False)
        reader = readback_reader(options)
        functions = (
            bound_readback(
                reader,
                options.get("config"),
                context=("ctx", ToolContext[Any]),
                session_of=self._session_of,
                why="this run's RunConfig folds another session with another filter; "
                "give the agent that filter's tools",
            )
            if reader is not None
            else []
        )
        self.tools: list[FunctionTool] = [function_tool(f) for f in functions]

    def _session_of(self, ctx: object) -> str | None:
        """This filter's session, unless the tool runs under a ``RunConfig`` whose input
        filter is another contextfold filter (the agent was given the wrong tools)."""
        run_config = getattr(ctx, "run_config", None)
        running = getattr(run_config, "call_model_input_filter", None)
        if isinstance(running, ContextfoldInputFilter) and running.session_id != self.session_id:
            return None
        return self.session_id

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        """Fold ``data.model_data.input``; the instructions are left as they are."""
        folder = self.sessions.get(self.session_id)
        instructions = data.model_data.instructions or ""
        tools = [
            ToolSpec(name=t.name, description=t.description, parameters=t.params_json_schema)
            for t in data.agent.tools
            if isinstance(t, FunctionTool)
        ]
        folded = await folder.fold(data.model_data.input, instructions, tools)
        return ModelInputData(input=folded.request, instructions=data.model_data.instructions)
