"""Tool execution: the agent's built-in tools beside the toolkit, the specs offered to
the model, and running the calls of a step."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from ..message import READBACK_KEY, Msg, ToolCallBlock, ToolResultBlock, ToolSpec
from ..tool import FunctionTool, SpecCache, Tool, Toolkit, error_result, readback_tools, run_tool
from ..workspace import WorkspaceReader
from ._permissions import Permissions

__all__ = ["BuiltinTools", "answers", "interrupted", "run_calls"]

_CHARS_PER_TOKEN = 2
"""A low estimate of characters per token (numbered log lines measure ~2.6 with the OpenAI
tokenizer, prose ~5), so a Read sized by it rarely exceeds the limit."""


class BuiltinTools:
    """The agent's own tools (tasks, CompressContext, the read-back tools), which shadow
    toolkit tools of the same name, and running a call against them and the toolkit."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        # The read-back tool objects (by identity), whose results are marked for the engine.
        self._readback: list[Tool] = []
        self._specs = SpecCache()

    def add(self, tool: Tool) -> None:
        self._tools[tool.name] = tool

    def add_readback(
        self, reader: WorkspaceReader, session_id: str, tool_result_limit: int
    ) -> None:
        """(Re)place the read-back tools, scoped to ``session_id``."""
        # Read stops early so its result usually fits tool_result_limit (at ~2 characters
        # per token) and points at the next offset instead of being cut.
        funcs = readback_tools(
            reader, session_id=session_id, max_chars=tool_result_limit * _CHARS_PER_TOKEN
        )
        self._readback = []
        for func in funcs:
            tool = FunctionTool(func)
            replaced = self._tools.get(tool.name)
            if replaced is not None:
                self._specs.forget(replaced)
            self._tools[tool.name] = tool
            self._readback.append(tool)

    def specs(self, toolkit: Toolkit) -> list[ToolSpec]:
        """The tools offered to the model: built-ins, then the toolkit's."""
        specs = [self._specs.get(t) for t in self._tools.values()]
        specs += [s for s in toolkit.specs() if s.name not in self._tools]
        return specs

    async def run(
        self, call: ToolCallBlock, toolkit: Toolkit, permissions: Permissions
    ) -> ToolResultBlock:
        """Run ``call``: a built-in, else the toolkit's tool, which ``permissions`` may refuse."""
        builtin = self._tools.get(call.name)
        tool = builtin or toolkit.get(call.name)
        # Built-ins touch only the agent's own state, so no rule may block them
        # (compress-context.zh, section 自主压缩, requires it for CompressContext); user
        # tools go through the rules.
        if builtin is None and tool is not None and call.input_error is None:
            refusal = await permissions.check(call)
            if refusal is not None:
                return error_result(call, refusal)
        available = [*self._tools, *toolkit.names]
        result = await run_tool(tool, call, available=available)
        # By identity, not name: a user tool called "Read" is offloaded as usual.
        if tool is not None and any(tool is t for t in self._readback):
            result = result.model_copy(update={"metadata": {**result.metadata, READBACK_KEY: True}})
        return result


async def run_calls(
    calls: list[ToolCallBlock],
    run: Callable[[ToolCallBlock], Coroutine[Any, Any, ToolResultBlock]],
    *,
    parallel: bool,
) -> list[ToolResultBlock]:
    """The results of ``calls``, in order: run concurrently when ``parallel``."""
    if not parallel or len(calls) == 1:
        return [await run(call) for call in calls]
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(run(call)) for call in calls]
    return [t.result() for t in tasks]


def answers(msg: Msg | None, calls: list[ToolCallBlock]) -> bool:
    """Whether ``msg`` holds the results of ``calls`` (stored before an interruption)."""
    if msg is None:
        return False
    answered = {r.id for r in msg.tool_results}
    return all(c.id in answered for c in calls)


def interrupted(call: ToolCallBlock) -> ToolResultBlock:
    return error_result(call, "Error: the tool call was interrupted before it finished.")
