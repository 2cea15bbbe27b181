"""The demo's plan, and the middleware that guides a small model through it.

The embedded model has 135M parameters: left alone, it rarely picks a sensible tool. So
each step of the plan forces one tool through ``tool_choice``; the model still writes the
arguments. Arguments that cannot work (a file that does not exist, a reference that was
never offloaded, a broken regex) are replaced by sensible ones, and every such
intervention is reported. ``final_answer`` keeps the tool list in the prompt (so the
cached prefix is reused) and its text becomes the agent's reply.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..context import CompressionEvent, ContextEvent, ContextUsage, TruncationEvent
from ..message import TextBlock, ToolCallBlock
from ..middleware import Middleware
from ..model import ChatResponse
from ..workspace import ItemInfo, WorkspaceReader
from ._demo_files import DemoFiles

if TYPE_CHECKING:
    from ..agent import Agent
    from ..middleware import ModelCallContext

__all__ = ["FINAL_TOOL", "PLAN_TEXT", "READBACK_TOOLS", "Guide", "GuideNote", "Plan", "PlanStep"]

FINAL_TOOL = "final_answer"
READBACK_TOOLS = frozenset({"Read", "Grep", "Glob"})
_READ_LIMIT = 30
_GREP_RESULTS = 20


@dataclass(frozen=True)
class PlanStep:
    """One step: the tool it forces and what it is for."""

    tool: str
    purpose: str


_LIST = PlanStep("list_files", "see what the folder holds")
_READBACK = (
    PlanStep("Grep", "search the offloaded content"),
    PlanStep("Read", "read offloaded content back"),
    PlanStep(FINAL_TOOL, "write the report"),
)
PLAN_TEXT = (
    "list_files; read_file, one file per step, until the context has been compressed (or "
    "no file is left); Grep and Read over the offloaded content; final_answer"
)
"""The plan, as the viewer is told it."""


class Plan:
    """Which tool each step forces: read files until a compression, then read back.

    Reading stops early enough that the read-back steps and the answer fit ``max_steps``
    (at least 5).
    """

    def __init__(self, files: DemoFiles, max_steps: int) -> None:
        if max_steps < 5:
            raise ValueError(f"the plan needs at least 5 steps, got {max_steps}")
        self.files = files
        self.max_steps = max_steps
        self.compressed = False
        self._readback_from: int | None = None
        self._what = "a recorded run" if files.recorded_runs else "a file"

    def step(self, index: int) -> PlanStep:
        """The step at 0-based ``index`` (asking twice for one index gives the same step)."""
        if index == 0:
            return _LIST
        if self._readback_from is None:
            left = self.max_steps - index
            if self.compressed or not self.files.unread() or left <= len(_READBACK):
                self._readback_from = index
            else:
                return PlanStep("read_file", f"read {self._what}")
        return _READBACK[min(index - self._readback_from, len(_READBACK) - 1)]


@dataclass
class GuideNote:
    """What the guide did at one step, for the view."""

    step: int
    text: str
    replaced: bool = False


@dataclass
class Guide(Middleware):
    """Forces the plan's tool at each step and repairs arguments that cannot work.

    With ``guided=False`` the model chooses its tools; arguments are still checked.
    ``on_usage`` receives the three layers' usage of every model call.
    """

    plan: Plan
    files: DemoFiles
    reader: WorkspaceReader
    session_id: str
    guided: bool = True
    on_note: Callable[[GuideNote], None] = lambda note: None
    on_usage: Callable[[int, ContextUsage], None] = lambda step, usage: None
    on_call: Callable[[int, str], None] = lambda step, tool: None
    truncation_refs: list[str] = field(default_factory=list)
    guided_steps: list[int] = field(default_factory=list)
    replaced_steps: list[int] = field(default_factory=list)
    prompt_tokens: int = 0
    """Input tokens the model reported, summed over the agent's calls."""
    cached_tokens: int = 0
    """Of those, what the provider said it read from its prompt cache."""

    async def on_context_event(self, event: ContextEvent, agent: Agent) -> None:
        if isinstance(event, TruncationEvent) and event.offload_ref:
            self.truncation_refs.append(event.offload_ref)
        elif isinstance(event, CompressionEvent):
            self.plan.compressed = True

    async def on_model_call(
        self,
        ctx: ModelCallContext,
        call_next: Callable[[ModelCallContext], Awaitable[ChatResponse]],
    ) -> ChatResponse:
        self.on_usage(ctx.step, ctx.model_input.usage)
        planned = self.plan.step(ctx.step)
        if self.guided:
            ctx.tool_choice = planned.tool
            self.guided_steps.append(ctx.step + 1)
            self.on_note(
                GuideNote(
                    ctx.step + 1,
                    f"guided: tool_choice={planned.tool!r} ({planned.purpose}); "
                    "the model writes the arguments",
                )
            )
        self.on_call(ctx.step + 1, planned.tool if self.guided else "")
        response = await call_next(ctx)
        if response.usage is not None:
            self.prompt_tokens += response.usage.input_tokens
            self.cached_tokens += response.usage.cache_read_tokens
        content: list[Any] = []
        for block in response.content:
            if isinstance(block, ToolCallBlock):
                block = await self._checked(ctx.step + 1, block)
                if block.name == FINAL_TOOL:
                    content.append(TextBlock(text=str(block.input.get("text", ""))))
                    continue
            content.append(block)
        if any(isinstance(b, ToolCallBlock) for b in content):
            return response.model_copy(update={"content": content})
        # A final answer ends the turn: keep the text only, as a plain reply.
        text = [b for b in content if isinstance(b, TextBlock)]
        return response.model_copy(update={"content": text, "stop_reason": "end_turn"})

    async def _checked(self, step: int, call: ToolCallBlock) -> ToolCallBlock:
        args = dict(call.input) if call.input_error is None else {}
        fixed, problem = await self._repair(call.name, args, call.input_error, call.raw_input)
        if problem is None:
            return call
        self.replaced_steps.append(step)
        wrote = " ".join(str(call.raw_input or call.input).split())
        wrote = wrote if len(wrote) <= 160 else wrote[:157] + "..."
        shown = " ".join(str(fixed).split())
        shown = shown if len(shown) <= 200 else shown[:197] + "..."
        self.on_note(
            GuideNote(
                step, f"the model's arguments {wrote} {problem}; using {shown}", replaced=True
            )
        )
        return ToolCallBlock(id=call.id, name=call.name, input=fixed)

    async def _repair(
        self, tool: str, args: dict[str, Any], error: str | None, raw: str | None
    ) -> tuple[dict[str, Any], str | None]:
        """Arguments that work, and why the model's did not (None when they did)."""
        if tool == "list_files":
            return ({}, "are not needed") if args else (args, None)
        if tool == "read_file":
            return self._repair_read_file(args, error)
        if tool == "Grep":
            return await self._repair_grep(args, error)
        if tool == "Read":
            return await self._repair_read(args, error)
        if tool == FINAL_TOOL:
            text = args.get("text")
            if isinstance(text, str) and text.strip():
                return args, None
            if error is not None and (cut := _cut_text(raw)):
                return {"text": cut + " [cut at the token limit]"}, "were cut at the token limit"
            return {"text": "(the model wrote no report)"}, "have no report text"
        return args, None

    def _repair_read_file(
        self, args: dict[str, Any], error: str | None
    ) -> tuple[dict[str, Any], str | None]:
        path = args.get("path")
        unread = self.files.unread()
        if error is None and isinstance(path, str) and path in unread:
            return args, None
        if isinstance(path, str) and path in self.files.names:
            problem = "name a file already read"
        else:
            problem = "are not valid JSON" if error else "name no file in the folder"
        target = unread[0] if unread else self.files.names[0]
        return {"path": target}, problem

    async def _items(self) -> list[ItemInfo]:
        return await self.reader.list_items(self.session_id)

    async def _repair_grep(
        self, args: dict[str, Any], error: str | None
    ) -> tuple[dict[str, Any], str | None]:
        pattern = args.get("pattern")
        problems: list[str] = []
        if error is None and isinstance(pattern, str) and 0 < len(pattern.strip()) <= 200:
            try:
                re.compile(pattern)
            except re.error as exc:
                problems.append(f"have an invalid regex ({exc})")
        else:
            problems.append("have no usable pattern")
        if problems:
            pattern = r"^exit_status|^api_calls" if self.files.recorded_runs else r"(?i)error"
        fixed: dict[str, Any] = {"pattern": pattern}
        items = await self._items()
        path = args.get("path")
        if path is not None and not problems:
            if any(path in (i.ref, i.path) for i in items):
                fixed["path"] = path
            else:
                problems.append("name no offloaded item as path")
        if isinstance(args.get("context"), int) and 0 <= args["context"] <= 3:
            fixed["context"] = args["context"]
        most = args.get("max_results")
        fixed["max_results"] = _GREP_RESULTS
        if isinstance(most, int) and 1 <= most <= _GREP_RESULTS:
            fixed["max_results"] = most
        elif most is not None:
            problems.append(f"ask for an unusable number of results (at most {_GREP_RESULTS})")
        if "glob" in args:
            problems.append("use a glob (dropped, to search every offloaded item)")
        return fixed, ("; ".join(problems) or None)

    async def _repair_read(
        self, args: dict[str, Any], error: str | None
    ) -> tuple[dict[str, Any], str | None]:
        items = await self._items()
        path = args.get("path")
        problems: list[str] = []
        target: str | None = None
        if error is None and isinstance(path, str) and path:
            if any(path in (i.ref, i.path) for i in items):
                target = path
            else:
                ends = [i.ref for i in items if i.path.endswith("/" + path.rsplit("/", 1)[-1])]
                if len(ends) == 1:
                    target = ends[0]
                    problems.append("give a partial path (completed)")
        if target is None:
            problems.append("name no offloaded item")
            target = self._fallback_item(items)
        offset = args.get("offset", 0)
        if not isinstance(offset, int) or offset < 0:
            problems.append("have an invalid offset")
            offset = 0
        if target != path and not isinstance(args.get("offset"), int):
            offset = 10  # past the head, which the truncated result kept in context
        limit = args.get("limit", _READ_LIMIT)
        if not isinstance(limit, int) or not 1 <= limit <= _READ_LIMIT:
            problems.append(f"ask for too many lines (at most {_READ_LIMIT})")
            limit = _READ_LIMIT
        return {"path": target, "offset": offset, "limit": limit}, ("; ".join(problems) or None)

    def _fallback_item(self, items: list[ItemInfo]) -> str:
        # The oldest truncated result: by now compression has taken it out of context.
        if self.truncation_refs:
            return self.truncation_refs[0]
        results = [i for i in items if i.kind == "tool_result"]
        chosen = results[0] if results else (items[0] if items else None)
        return chosen.ref if chosen is not None else "(nothing offloaded yet)"


def _cut_text(raw: str | None) -> str:
    """The text of a ``final_answer`` call whose JSON was cut off by the token limit."""
    match = re.match(r'\s*\{\s*"text"\s*:\s*"(.*)', raw or "", re.DOTALL)
    if match is None:
        return ""
    return match.group(1).replace("\\n", "\n").replace('\\"', '"').strip()
