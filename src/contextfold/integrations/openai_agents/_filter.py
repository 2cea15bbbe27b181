"""ContextfoldInputFilter: the engine as the Agents SDK's ``call_model_input_filter``."""

from __future__ import annotations

from typing import Any, Unpack

from agents import FunctionTool, function_tool
from agents.run_config import CallModelData, ModelInputData

from ...message import ToolSpec
from .._options import EngineOptions, Sessions, readback_functions
from ._codec import AgentsCodec, Item

__all__ = ["ContextfoldInputFilter"]


class ContextfoldInputFilter:
    """``RunConfig(call_model_input_filter=...)`` that keeps every model call in the window.

    The SDK keeps the whole run's items and calls the filter before each model call; the
    filter feeds the engine the new items (tool outputs over ``tool_result_limit`` are
    cut and offloaded), compresses when the request (instructions and tools included) is
    over the trigger, and returns the summary and kept items. :attr:`tools` are ``Read``,
    ``Grep`` and ``Glob`` as ``function_tool``s: add them to the agent. One conversation
    per filter (``session_id``, also the offload session); takes the
    :class:`~contextfold.integrations.EngineOptions`.
    """

    def __init__(self, *, session_id: str = "default", **options: Unpack[EngineOptions]) -> None:
        self.session_id = session_id
        self.sessions: Sessions[Item] = Sessions(options, AgentsCodec(), rewrites_history=False)
        self.tools: list[FunctionTool] = [function_tool(f) for f in readback_functions(options)]

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
