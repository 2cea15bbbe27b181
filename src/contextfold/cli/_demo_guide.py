"""The demo's plan, and the middleware that keeps a small model within valid bounds.

The embedded model has 135M parameters: left alone, it rarely picks a sensible tool. So
each step of the plan may force one tool through ``tool_choice``. The arguments are the
model's own: before each call the guide narrows the grammar the embedded model decodes
them under to the values valid right now, drawn from the model's context
(:mod:`._demo_choices`); nothing is replaced afterwards. Every step says what the plan
forced and what the model chose. ``final_answer`` keeps the tool list in the prompt (so
the cached prefix is reused); its structured arguments become the agent's reply.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..context import CompressionEvent, ContextEvent, ContextUsage
from ..message import TextBlock, ToolCallBlock, ToolSpec
from ..middleware import AgentView, Middleware
from ..model import ChatResponse
from ..workspace import WorkspaceReader
from ._demo_choices import (
    Constraint,
    answer_constraint,
    context_text,
    grep_constraint,
    read_constraint,
    read_file_constraint,
    run_grep_constraint,
    user_text,
)
from ._demo_files import DemoFiles

if TYPE_CHECKING:
    from ..middleware import ModelCallContext

__all__ = [
    "FINAL_TOOL",
    "PLAN_TEXT",
    "READBACK_TOOLS",
    "RUNS_PLAN_TEXT",
    "RUN_GREP",
    "Guide",
    "GuideNote",
    "Plan",
    "PlanStep",
    "StepRecord",
    "render_answer",
]

FINAL_TOOL = "final_answer"
READBACK_TOOLS = frozenset({"Read", "Grep", "Glob"})


RUN_GREP = "Grep:run"
"""The constraint of a Grep in one run's log (the tool is Grep)."""


@dataclass(frozen=True)
class PlanStep:
    """One step: the tool it forces, what it is for, and which of the guide's
    constraints its arguments are decoded under (the tool's own by default)."""

    tool: str
    purpose: str
    key: str = ""

    @property
    def constraint(self) -> str:
        """The name of the constraint this step's arguments are decoded under."""
        return self.key or self.tool


_LIST = PlanStep("list_files", "see what the folder holds")
_FINAL = PlanStep(FINAL_TOOL, "write the report")
_READBACK = (
    PlanStep("Read", "read offloaded content back"),
    PlanStep("Grep", "search the offloaded content"),
    _FINAL,
)
_RUNS_READBACK = (
    PlanStep("Grep", "find how each run ended, in every offloaded log"),
    PlanStep("Grep", "find the error a run met, in its offloaded log", RUN_GREP),
    _FINAL,
)
"""Recorded runs: the error search is repeated, one run's log per step, right before the
answer, so the lines it finds are still in the context when the answer is written."""
PLAN_TEXT = (
    "list_files; read_file, one file per step, until the context has been compressed (or "
    "no unread file is named in the context); Read and Grep over the offloaded content; "
    "final_answer"
)
"""The plan, as the viewer is told it."""
RUNS_PLAN_TEXT = (
    "list_files; read_file, one recorded run per step, while unread runs are named in the "
    "context; Grep how every run ended; Grep each run's offloaded log for the error it "
    "met, one run per step; final_answer"
)
"""The plan on recorded runs, as the viewer is told it."""


class Plan:
    """Which tool each step forces: read files until a compression, then read back.

    Reading stops early enough that the read-back steps and the answer fit ``max_steps``
    (at least 5). On recorded runs the read-back is a search over every log, then one
    search per run's log (repeated while a log is left to search), then the answer.
    """

    def __init__(self, files: DemoFiles, max_steps: int) -> None:
        if max_steps < 5:
            raise ValueError(f"the plan needs at least 5 steps, got {max_steps}")
        self.files = files
        self.max_steps = max_steps
        self.compressed = False
        self._reading_done = False
        self._next = 0
        """The read-back step to take next."""
        self._steps: dict[int, PlanStep] = {}
        self._what = "a recorded run" if files.recorded_runs else "a file"
        self._readback = _RUNS_READBACK if files.recorded_runs else _READBACK

    @property
    def text(self) -> str:
        """The plan, as the viewer is told it."""
        return RUNS_PLAN_TEXT if self.files.recorded_runs else PLAN_TEXT

    def _room(self) -> int:
        """Steps the read-back and the answer need after one more file is read."""
        if self.files.recorded_runs:  # a search over all, one per run read, the answer
            return len(self.files.read) + 3
        return len(_READBACK)

    def step(self, index: int, *, usable: frozenset[str] | None = None) -> PlanStep:
        """The step at 0-based ``index`` (asking twice gives the same step). ``usable``
        names the tools with valid arguments in the context now (default: all): reading
        stops when no unread file is named, and a read-back step with nothing to read
        back is passed over."""
        if index in self._steps:
            return self._steps[index]

        def ok(step: PlanStep) -> bool:
            return usable is None or step.constraint in usable or step.tool == FINAL_TOOL

        left = self.max_steps - index
        readback = self._readback
        if index == 0:
            step = _LIST
        elif not self._reading_done and not (
            self.compressed or not ok(PlanStep("read_file", "")) or left <= self._room()
        ):
            step = PlanStep("read_file", f"read {self._what}")
        else:
            self._reading_done = True
            last = len(readback) - 1
            while self._next < last and not ok(readback[self._next]):
                self._next += 1
            step = readback[self._next] if left > 1 else _FINAL
            # One run's search repeats while a log is left to search and the answer fits.
            if step.key != RUN_GREP or left <= 2:
                self._next = min(self._next + 1, last)
        self._steps[index] = step
        return step


@dataclass
class GuideNote:
    """What the guide did at one step, for the view."""

    step: int
    text: str


@dataclass(frozen=True)
class StepRecord:
    """Who decided what at one step."""

    step: int
    tool: str
    tool_forced: bool
    constraint: Constraint | None

    @property
    def chosen(self) -> bool:
        """Whether the model chose anything: the tool, or an argument among two values
        or more. Otherwise the plan forced the step."""
        return not self.tool_forced or (self.constraint is not None and self.constraint.chosen)


@dataclass
class Guide(Middleware):
    """Forces the plan's tool at each step and narrows the arguments' grammar to valid
    values from the context (:meth:`schema_for`, the embedded model's ``constrain``).

    With ``guided=False`` the model chooses its tools; the arguments are narrowed alike.
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
    records: list[StepRecord] = field(default_factory=list)
    answer: dict[str, Any] | None = None
    """The final answer's arguments, as the model wrote them."""
    prompt_tokens: int = 0
    """Input tokens the model reported, summed over the agent's calls."""
    cached_tokens: int = 0
    """Of those, what the provider said it read from its prompt cache."""
    searched: list[tuple[str, str | None]] = field(default_factory=list)
    """The Grep calls made, as pattern and path (None: every item): what the plan's
    searches have covered, which the context alone forgets once they are folded."""
    _constraints: dict[str, Constraint] = field(default_factory=dict)
    _planned: PlanStep | None = None

    def _constraint(self, tool: str) -> Constraint | None:
        """The constraint of ``tool`` for the current call: the planned step's, when the
        plan forced that tool."""
        planned = self._planned
        if self.guided and planned is not None and planned.tool == tool:
            return self._constraints.get(planned.constraint)
        return self._constraints.get(tool)

    def schema_for(self, tool: ToolSpec) -> dict[str, Any] | None:
        """The schema the current call's arguments of ``tool`` are decoded under."""
        constraint = self._constraint(tool.name)
        return None if constraint is None else constraint.schema

    async def on_context_event(self, event: ContextEvent, agent: AgentView) -> None:
        if isinstance(event, CompressionEvent):
            self.plan.compressed = True

    async def _narrowed(self, ctx: ModelCallContext) -> dict[str, Constraint]:
        text = context_text(ctx.messages)
        items = [
            i for i in await self.reader.list_items(self.session_id) if i.kind == "tool_result"
        ]
        lines = {i.ref: len((await self.reader.read(i.ref)).splitlines()) for i in items}
        user = user_text(ctx.messages)
        runs = self.guided and self.files.recorded_runs  # the plan's searches, in order
        found: dict[str, Constraint | None] = {
            "list_files": Constraint({"type": "object", "properties": {}}),
            "read_file": read_file_constraint(self.files.unread(), text),
            "Grep": grep_constraint(user, searched=self.searched if runs else None),
            RUN_GREP: (
                run_grep_constraint(text, user, self.files.subjects(), self.searched)
                if runs
                else None
            ),
            "Read": read_constraint(text, lines),
            FINAL_TOOL: answer_constraint(
                ctx.messages, self.files.subjects(), recorded=self.files.recorded_runs
            ),
        }
        return {name: c for name, c in found.items() if c is not None}

    async def on_model_call(
        self,
        ctx: ModelCallContext,
        call_next: Callable[[ModelCallContext], Awaitable[ChatResponse]],
    ) -> ChatResponse:
        self.on_usage(ctx.step, ctx.model_input.usage)
        self._constraints = await self._narrowed(ctx)
        planned = self.plan.step(ctx.step, usable=frozenset(self._constraints))
        self._planned = planned
        if self.guided:
            ctx.tool_choice = planned.tool
        self.on_call(ctx.step + 1, planned.tool if self.guided else "")
        response = await call_next(ctx)
        if response.usage is not None:
            self.prompt_tokens += response.usage.input_tokens
            self.cached_tokens += response.usage.cache_read_tokens
        content: list[Any] = []
        for block in response.content:
            if isinstance(block, ToolCallBlock):
                self._record(ctx.step + 1, block.name, planned if self.guided else None)
                if block.name == "Grep" and isinstance(block.input.get("pattern"), str):
                    path = block.input.get("path")
                    self.searched.append((block.input["pattern"], str(path) if path else None))
                if block.name == FINAL_TOOL:
                    content.append(TextBlock(text=self._answer_text(block)))
                    continue
            content.append(block)
        if any(isinstance(b, ToolCallBlock) for b in content):
            return response.model_copy(update={"content": content})
        # A final answer ends the turn: keep the text only, as a plain reply.
        text = [b for b in content if isinstance(b, TextBlock)]
        return response.model_copy(update={"content": text, "stop_reason": "end_turn"})

    def _record(self, step: int, tool: str, planned: PlanStep | None) -> None:
        constraint = self._constraint(tool)
        record = StepRecord(step, tool, planned is not None, constraint)
        self.records.append(record)
        forced = f"plan forced {tool} ({planned.purpose})" if planned else f"model chose {tool}"
        if constraint is None:
            args = "arguments unconstrained (no valid values in the context to narrow to)"
        else:
            args = constraint.describe()
        who = "chosen by the model" if record.chosen else "forced by the plan"
        self.on_note(GuideNote(step, f"{who}: {forced}; {args}"))

    def _answer_text(self, call: ToolCallBlock) -> str:
        if call.input_error is not None:
            return f"(the final answer is not a JSON object: {call.input_error})"
        self.answer = dict(call.input)
        return render_answer(self.answer)


def render_answer(answer: dict[str, Any]) -> str:
    """The structured final answer as lines of text."""
    lines: list[str] = []
    subjects = answer.get("runs", answer.get("files", {}))
    for name, facts in subjects.items() if isinstance(subjects, dict) else ():
        if not isinstance(facts, dict):
            continue
        parts = []
        if "evidence" in facts:
            parts.append(f"seen: {facts['evidence']}")
        if "files_changed" in facts:
            parts.append("changed " + ", ".join(map(str, facts["files_changed"])))
        if "error" in facts:
            parts.append(f"met: {facts['error']}")
        if "found" in facts:
            parts.append(f"found: {facts['found']}")
        lines.append(f"- {name}: " + "; ".join(parts))
    if "shared" in answer:
        lines.append(f"Shared: {answer['shared']}")
    return "\n".join(lines) if lines else json.dumps(answer, ensure_ascii=False)
