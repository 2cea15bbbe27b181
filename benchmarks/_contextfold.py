"""Drive contextfold's ``Agent`` with the same replayed turns, tool outputs and summarizer.

Every piece of our side that is missing or unfinished raises :class:`Pending` with what is
missing, so a figure can say "pending" instead of inventing a number.
"""

from __future__ import annotations

import inspect
import itertools
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from ._common import Compression, FrameworkClock, Pending, RunResult
from ._data import FINAL_TEXT, Session

__all__ = ["flatten", "make_workspace", "render", "run_session"]


def _import() -> dict[str, Any]:
    try:
        from contextfold.agent import Agent
        from contextfold.context import ContextConfig, SummaryResult, summarize_items
        from contextfold.message import (
            HintBlock,
            Msg,
            TextBlock,
            ThinkingBlock,
            ToolCallBlock,
            ToolResultBlock,
        )
        from contextfold.model import ScriptedModel
        from contextfold.tool import Toolkit
    except ImportError as exc:
        raise Pending(f"contextfold is missing a piece the benchmark needs: {exc}") from exc
    return {
        "Agent": Agent,
        "ContextConfig": ContextConfig,
        "HintBlock": HintBlock,
        "Msg": Msg,
        "TextBlock": TextBlock,
        "ThinkingBlock": ThinkingBlock,
        "ToolCallBlock": ToolCallBlock,
        "ToolResultBlock": ToolResultBlock,
        "ScriptedModel": ScriptedModel,
        "Toolkit": Toolkit,
        "summarize_items": summarize_items,
        "SummaryResult": SummaryResult,
    }


def _block_items(role: str, block: Any) -> list[tuple[str, str]]:
    kind = getattr(block, "type", "")
    if kind == "text":
        return [(role, block.text)]
    if kind == "thinking":
        return [(role, block.thinking)]
    if kind == "hint":
        return [(role, block.hint)]
    if kind == "tool_call":
        return [("assistant", "\n".join(str(v) for v in block.input.values()))]
    if kind == "tool_result":
        return [("tool", block.text())]
    return []


def flatten(msgs: list[Any]) -> list[tuple[str, str]]:
    """contextfold messages as the summarizer's neutral ``(role, text)`` items."""
    items: list[tuple[str, str]] = []
    for m in msgs:
        for b in m.blocks():
            items.extend(_block_items(m.role, b))
    return items


def summary_request_items(request: Any) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """A ``SummaryRequest`` as (previous summary items, compressed span items): the neutral
    items :func:`flatten` gives, the same shape the AgentScope side hands the shared
    summarizer. The engine hands the summarizer the messages themselves, so nothing is
    parsed back out of a prompt."""
    previous = [] if request.previous is None else [("user", request.previous.text)]
    return previous, flatten(list(request.messages))


def render(msgs: list[Any], tools: list[Any]) -> str:
    """The same neutral request rendering as the AgentScope side uses."""

    specs = [
        {"type": "function", "function": t.model_dump()} if hasattr(t, "model_dump") else t
        for t in tools
    ]
    parts = [json.dumps(specs, sort_keys=True)]
    for m in msgs:
        parts.append(f"<|{m.role}|>")
        for b in m.blocks():
            for _, text in _block_items(m.role, b):
                parts.append(text)
    return "\n".join(parts)


def _render_summary(template: str, fields: dict[str, Any]) -> str:
    """The summary as our agent shows it (our renderer keeps stray braces literally)."""
    try:
        from contextfold.context import render_summary
    except ImportError:
        return template.format(**fields)
    return render_summary(template, fields)


def _made(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    return root


async def make_workspace(root: Path, *, backend: str = "local") -> Any:
    """One of our workspaces (initialized); Pending if it is not there yet."""
    try:
        from contextfold import workspace as ws_mod
    except ImportError as exc:
        raise Pending(f"contextfold.workspace is not available: {exc}") from exc
    ws: Any
    if backend == "local":
        ws = ws_mod.LocalWorkspace(root)
    elif backend == "sqlite":
        ws = ws_mod.SQLiteWorkspace(_made(root) / "workspace.db")
    elif backend == "memory":
        ws = ws_mod.MemoryWorkspace()
    else:
        raise ValueError(f"unknown backend {backend!r}")
    await ws.initialize()
    return ws


async def run_session(
    session: Session,
    *,
    context_size: int,
    record: bool = False,
    tool_result_limit: int = 3000,
    offload: bool = True,
) -> RunResult:
    """Replay ``session`` through contextfold's ``Agent``; return per-step framework time."""
    cf = _import()
    clock = FrameworkClock()
    outputs = [s.output for s in session.steps]
    state: dict[str, Any] = {"step": 0, "tool": 0}
    marks: list[float] = []
    compressions: list[Compression] = []
    requests: list[str] = []
    template = cf["ContextConfig"]().summary_template
    summarize_items = cf["summarize_items"]

    class SharedSummarizer:
        """The shared extractive summarizer, through the engine's Summarizer seam."""

        async def summarize(self, request: Any) -> Any:
            # Model time, as on AgentScope's side, where the same summarizer answers inside
            # its model call: the summarizer stands in for a model.
            start = time.perf_counter()
            try:
                previous, span = summary_request_items(request)
                fields = summarize_items(previous + span)
            finally:
                clock.add(time.perf_counter() - start, kind="model")
            compressions.append(
                Compression(
                    span_text="\n".join(t for _, t in span),
                    summary_text=_render_summary(template, fields),
                )
            )
            return cf["SummaryResult"](fields=fields)

    def script(request: Any) -> Any:
        marks.append(mark_holder["mark"])
        if record:
            requests.append(render(request.messages, request.tools))
        steps = session.steps
        if state["step"] >= len(steps):
            return FINAL_TEXT
        st = steps[state["step"]]
        state["step"] += 1
        blocks: list[Any] = []
        if st.thought:
            blocks.append(cf["TextBlock"](text=st.thought))
        blocks.append(
            cf["ToolCallBlock"](
                id=f"call_{state['step']}", name="bash", input={"command": st.command}
            )
        )
        return blocks

    mark_holder = {"mark": 0.0}

    base: Any = cf["ScriptedModel"]

    class TimedModel(base):  # type: ignore[misc]
        async def _generate(self, messages: Any, **kwargs: Any) -> Any:
            mark_holder["mark"] = clock.now()
            start = time.perf_counter()
            try:
                return await super()._generate(messages, **kwargs)
            finally:
                clock.add(time.perf_counter() - start, kind="model")

    async def bash(command: str) -> str:
        """Run a shell command.

        Args:
            command: The command to run.
        """
        start = time.perf_counter()
        i = state["tool"]
        state["tool"] += 1
        out = outputs[i] if i < len(outputs) else ""
        clock.add(time.perf_counter() - start, kind="tool")
        return out

    # keep_requests=0: a replay needs no request log, and holding every request would
    # bill the test double's memory to our engine.
    model = TimedModel(script, context_size=context_size, report_usage=False, keep_requests=0)
    tmp = tempfile.TemporaryDirectory(prefix="bench-cf-")
    try:
        offloader = await make_workspace(Path(tmp.name) / "ws") if offload else None
        try:
            config = cf["ContextConfig"](tool_result_limit=tool_result_limit)
            extra: dict[str, Any] = {}
            if "max_iters" in inspect.signature(cf["Agent"]).parameters:
                extra["max_iters"] = len(session.steps) + 10
            agent = cf["Agent"](
                name="replay",
                system_prompt=session.system,
                model=model,
                toolkit=cf["Toolkit"]([bash]),
                context_config=config,
                offloader=offloader,
                summarizer=SharedSummarizer(),
                **extra,
            )
        except TypeError as exc:
            raise Pending(f"contextfold Agent does not take the expected arguments: {exc}") from exc
        wall0 = time.perf_counter()
        f0 = clock.now()
        await agent.reply(cf["Msg"]("user", session.task, "user"))
        f_end = clock.now()
        wall = time.perf_counter() - wall0
        if state["step"] != len(session.steps):
            raise RuntimeError(
                f"contextfold replay of {session.name} stopped at step {state['step']} of "
                f"{len(session.steps)}"
            )
        all_marks = [f0, *marks, f_end]
        overheads = [b - a for a, b in itertools.pairwise(all_marks)]
        result = RunResult(
            system="contextfold",
            session=session.name,
            step_overheads=overheads,
            step_history=[2 + 2 * i for i in range(len(overheads))],
            total_overhead=f_end - f0,
            model_time=clock.model_time,
            tool_time=clock.tool_time,
            wall=wall,
            compressions=compressions,
            requests=requests,
        )
        root = Path(tmp.name) / "ws"
        if root.exists():
            result.offload_text = "\n".join(
                p.read_text(encoding="utf-8", errors="replace")
                for p in sorted(root.rglob("*"))
                if p.is_file()
            )
        return result
    finally:
        tmp.cleanup()
