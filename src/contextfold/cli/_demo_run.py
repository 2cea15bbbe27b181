"""One demo run: an agent on a small window, its events turned into lines for a view."""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.text import Text

from .._logging import logger
from ..agent import Agent, ReplyEvent
from ..context import (
    BackgroundCompactionEvent,
    BackgroundConfig,
    CompressionEvent,
    ContextConfig,
    ContextEvent,
    ContextUsage,
    ImageRemovalEvent,
    ModelSummarizer,
    TruncationEvent,
    UsageHintEvent,
)
from ..message import Marker, Msg, ToolResultBlock, marker_of
from ..middleware import AgentView, Middleware, ModelCallContext, ToolCallContext
from ..model import ChatModelBase, ChatResponse, LocalChatModel, ModelCall
from ..tool import FunctionTool, readback_tools
from ..workspace import ItemInfo, LocalWorkspace
from ._demo_files import DemoFiles
from ._demo_guide import (
    FINAL_TOOL,
    READBACK_TOOLS,
    Guide,
    GuideNote,
    Plan,
    StepRecord,
)
from ._demo_model import CacheMeter, NarratedLocalModel, cache_meters
from ._demo_view import DemoView

__all__ = ["DemoResult", "DemoSettings", "run_demo"]

_SYSTEM_PROMPT = (
    "You are an analyst. You investigate files with your tools and report what you found. "
    "Tool results that are too long are cut; the full text is saved, and the cut result "
    "says where: read it back with Read or search it with Grep. Older messages may be "
    "replaced by a summary. When you are done, call final_answer with what you found."
)
_RUNS_TASK = (
    "The folder holds recorded runs of a coding agent working on GitHub issues. Find how "
    'each run ended and the files its patch changed (Grep "outcome of"), and the error or '
    'failing test it met (Grep its log for "Error: |^FAILED "). Then report each run by '
    "its instance id, and what the runs share."
)
"""Short: the window holds it at every step, and its searches are the plan's, in order."""
_FILES_TASK = (
    'Investigate the files in the folder: read them, search them (Grep "def " or '
    '"class "), and report one line you found in each file you read, and what the '
    "files share."
)


@dataclass(frozen=True)
class DemoSettings:
    """What the command line chose."""

    folder: Path
    workdir: Path
    context_size: int
    tool_result_limit: int
    max_steps: int
    guided: bool
    trigger_ratio: float = 0.72
    """On the recorded runs the inputs sit ~100 tokens inside each bound: under it before the
    search over every log (2,080-2,110 of 3,072), over it after (2,326-2,356), so the
    compression folds the runs read and keeps that search; under it at the answer, after
    the per-run searches (2,020-2,060). At 0.75 the second bound held by 22-28 tokens."""
    reserve_ratio: float = 0.2
    background: bool = False
    """Prepare summaries in the background from ``background_start`` of the window."""
    background_start: float = 0.55


@dataclass
class DemoResult:
    """What happened, for the closing report."""

    session_id: str
    workdir: Path
    reply: str = ""
    steps: int = 0
    truncations: int = 0
    compressions: list[CompressionEvent] = field(default_factory=list)
    background: list[BackgroundCompactionEvent] = field(default_factory=list)
    """Phases of the summaries prepared in the background (``--background``)."""
    waits: list[float] = field(default_factory=list)
    """Seconds the agent stood still for each compression (for a prepared one, what was
    left of it at the trigger)."""
    readbacks: int = 0
    records: list[StepRecord] = field(default_factory=list)
    answer: dict[str, Any] | None = None
    """The final answer's fields, as the model wrote them."""
    chosen_readbacks: int = 0
    """Read-backs whose arguments the model chose (among two values or more)."""
    items: list[ItemInfo] = field(default_factory=list)
    peak: ContextUsage | None = None
    seconds: float = 0.0
    agent_cache: CacheMeter | None = None
    summary_cache: CacheMeter | None = None
    provider_cached: int = 0
    provider_prompt: int = 0


def _rel(ref: str | None, workdir: Path) -> str:
    if not ref:
        return "nowhere (no offloader)"
    prefix = str(workdir) + "/"
    return ref[len(prefix) :] if ref.startswith(prefix) else ref


def _args(values: dict[str, object]) -> str:
    text = ", ".join(f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in values.items())
    return text if len(text) <= 160 else text[:157] + "..."


class _Narrator(Middleware):
    """Turns what the agent does into lines, as it happens, and counts what the viewer
    should see. A middleware, so its lines and the guide's come in the agent's order."""

    def __init__(
        self, view: DemoView, result: DemoResult, workdir: Path, guide: Guide | None = None
    ) -> None:
        self.guide = guide
        self.view = view
        self.result = result
        self.workdir = workdir
        self.started = time.monotonic()
        self.hinted = False
        self.applied: BackgroundCompactionEvent | None = None

    def line(self, *parts: tuple[str, str]) -> None:
        stamp = (f"{time.monotonic() - self.started:5.0f}s ", "dim")
        self.view.log(Text.assemble(stamp, *parts))

    def note(self, note: GuideNote) -> None:
        self.line((f"step {note.step}", "bold"), ("  · " + note.text, "dim"))

    def usage(self, step: int, usage: ContextUsage) -> None:
        self.result.steps = step + 1
        if self.result.peak is None or usage.total > self.result.peak.total:
            self.result.peak = usage
        self.view.usage(step + 1, usage)

    def calling(self, step: int, tool: str) -> None:
        what = f"writing the {tool} arguments" if tool else "choosing what to do"
        self.view.status(f"step {step}: the model is {what}")

    def summarizing(self) -> None:
        self.view.status("compressing: the embedded model is writing the summary")

    def context_event(self, event: ContextEvent) -> None:
        if isinstance(event, TruncationEvent):
            self.result.truncations += 1
            self.line(
                ("  ✂ truncated ", "bold red"),
                (
                    f"{event.tool_name} result: {event.tokens_before:,} → "
                    f"{event.tokens_after:,} tokens (marker included); full text offloaded "
                    f"to {_rel(event.offload_ref, self.workdir)}",
                    "red",
                ),
            )
        elif isinstance(event, CompressionEvent):
            self.result.compressions.append(event)
            prepared, self.applied = self.applied, None  # the prepared one follows its event
            self.result.waits.append(prepared.waited_s if prepared else event.duration_s)
            how = (
                "summary prepared in the background, swapped in"
                if prepared is not None
                else "summary written by the model"
                if event.method == "summary"
                else f"FALLBACK: the summary failed ({event.error}), oldest messages dropped"
            )
            self.line(
                ("  ⇣ compressed ", "bold magenta"),
                (
                    f"({event.trigger}, {how}, {event.attempts} attempt(s), "
                    f"{event.duration_s:.1f}s): {event.tokens_before:,} → "
                    f"{event.tokens_after:,} tokens; {event.messages_removed} message(s) "
                    f"folded, {event.messages_kept} kept; originals offloaded to "
                    f"{_rel(event.offload_ref, self.workdir)}",
                    "magenta",
                ),
            )
        elif isinstance(event, UsageHintEvent) and not self.hinted:
            self.hinted = True  # shown once; it is repeated at every step past the mark
            self.line(
                ("  ℹ usage note ", "bold cyan"),
                (
                    f"appended to the input: {event.tokens:,} of {event.context_size:,} "
                    "tokens used (not stored; repeated at each step past the mark)",
                    "cyan",
                ),
            )
        elif isinstance(event, BackgroundCompactionEvent):
            self.result.background.append(event)
            self.applied = event if event.phase == "applied" else None
            self.line(("  ⟳ background summary ", "bold blue"), (_phase(event), "blue"))
        elif isinstance(event, ImageRemovalEvent):
            self.line(("  ▣ images removed ", "bold"), (str(event.images_removed), ""))

    async def on_context_event(self, event: ContextEvent, agent: AgentView) -> None:
        self.context_event(event)

    async def on_tool_call(
        self,
        ctx: ToolCallContext,
        call_next: Callable[[ToolCallContext], Awaitable[ToolResultBlock]],
    ) -> ToolResultBlock:
        call, step = ctx.call, ctx.step + 1
        readback = call.name in READBACK_TOOLS
        self.line(
            (f"step {step}", "bold"),
            ("  ↺ read-back " if readback else "  ▶ ", "bold green" if readback else "bold"),
            (f"{call.name}({_args(call.input)})", "green" if readback else ""),
        )
        self.view.status(f"step {step}: running {call.name}")
        result = await call_next(ctx)
        text = result.text()
        found = readback and not result.is_error
        found = found and not text.startswith(("Error", "No matches", "No offloaded", "(no lines"))
        if found:
            self.result.readbacks += 1
            record = self.guide.records[-1] if self.guide and self.guide.records else None
            if record is not None and record.step == step and record.chosen:
                self.result.chosen_readbacks += 1
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
        tokens = ctx.agent.engine.counter.count_text(text)
        self.line(
            ("        ← ", "dim"),
            (f"{result.name}: {tokens:,} tokens", "bold green" if found else "dim"),
            (", offloaded content read back" if found else "", "green"),
            (f": {first[:90]}", "dim"),
        )
        self.view.status(f"step {step + 1}: preparing the input (compresses if over the trigger)")
        return result


def _is_usage_hint(msg: Msg) -> bool:
    """The engine's context-usage note."""
    return marker_of(msg) is Marker.USAGE_HINT


class _AnswerWithoutUsageNote(Middleware):
    """Leaves the usage note out of the request that writes the final answer.

    Past the hint mark the engine appends "Context usage: N of M tokens ... summarized
    automatically at 75%" as the last user message of every request. For the final
    answer that note is both useless (no step follows to act on it) and harmful: a 135M
    model writes about the most recent text it saw, so its report turned into a
    paraphrase of the note ("the context usage is preserved ... at 75%"). Must come
    after the Guide, which sets ``tool_choice`` to the final answer.
    """

    def __init__(self, on_note: Callable[[GuideNote], None]) -> None:
        self.on_note = on_note

    async def on_model_call(
        self,
        ctx: ModelCallContext,
        call_next: Callable[[ModelCallContext], Awaitable[ChatResponse]],
    ) -> ChatResponse:
        if ctx.tool_choice == FINAL_TOOL and ctx.messages and _is_usage_hint(ctx.messages[-1]):
            ctx.messages = ctx.messages[:-1]
            self.on_note(
                GuideNote(
                    ctx.step + 1, "usage note left out: the final answer needs no usage advice"
                )
            )
        return await call_next(ctx)


class _LogToView(logging.Handler):
    """The library's warnings (e.g. nothing left to compress) as lines of the demo."""

    def __init__(self, narrator: _Narrator) -> None:
        super().__init__(logging.WARNING)
        self.narrator = narrator

    def emit(self, record: logging.LogRecord) -> None:
        self.narrator.line(("  ! engine: ", "bold yellow"), (record.getMessage(), "yellow"))


async def run_demo(
    settings: DemoSettings,
    model: ChatModelBase,
    summarizer: ChatModelBase,
    view: DemoView,
    *,
    middleware: Sequence[Middleware] = (),
) -> DemoResult:
    """Run the agent on the task folder; every event goes to ``view`` as it happens.

    ``middleware`` runs after the demo's own (closest to the model and the tools)."""
    started = time.monotonic()
    files = DemoFiles.scan(settings.folder)
    workspace = LocalWorkspace(settings.workdir, fsync=False)
    await workspace.initialize()
    plan = Plan(files, settings.max_steps)
    config = ContextConfig(
        trigger_ratio=settings.trigger_ratio,
        reserve_ratio=settings.reserve_ratio,
        tool_result_limit=settings.tool_result_limit,
        background=(
            BackgroundConfig(start_ratio=settings.background_start, idle=False)
            if settings.background
            else None
        ),
    )
    session_id = uuid.uuid4().hex[:12]  # short: the model reads it in every reference
    result = DemoResult(session_id=session_id, workdir=workspace.workdir)
    narrator = _Narrator(view, result, workspace.workdir)
    guide = Guide(
        plan=plan,
        files=files,
        reader=workspace,
        session_id=session_id,
        guided=settings.guided,
        on_note=narrator.note,
        on_usage=narrator.usage,
        on_call=narrator.calling,
    )
    narrator.guide = guide
    toolkit = files.toolkit()
    # Read and Grep only: Glob would cost the tiny window ~70 tokens and the plan needs none.
    # On recorded runs the guided plan only searches, so Read's description is left out
    # too: the answer step needs that room for the error lines of the last searches.
    readback = readback_tools(workspace, session_id=session_id)[:2]
    if settings.guided and files.recorded_runs:
        readback = readback[1:]
    for func in readback:
        toolkit.register(FunctionTool(func))
    agent = Agent(
        name="analyst",
        system_prompt=_SYSTEM_PROMPT,
        model=model,
        toolkit=toolkit,
        context_config=config,
        offloader=workspace,
        summarizer=ModelSummarizer(summarizer, attempts=2),
        middleware=[narrator, guide, _AnswerWithoutUsageNote(narrator.note), *middleware],
        max_iters=settings.max_steps,
        session_id=session_id,
        tasks_enabled=False,
        readback_tools=False,
        parallel_tool_calls=False,
    )
    if isinstance(model, LocalChatModel):
        model.constrain = guide.schema_for
    if isinstance(summarizer, NarratedLocalModel):
        summarizer.on_summary = narrator.summarizing
    task = _RUNS_TASK if files.recorded_runs else _FILES_TASK
    narrator.line(("task: ", "bold"), (task, ""))
    if settings.guided:
        narrator.line(("plan (the tool of every step forced): ", "bold"), (plan.text, "dim"))
    handler = _LogToView(narrator)
    logger.addHandler(handler)
    recording = workspace.workdir / "requests.jsonl"
    models = [model] if summarizer is model else [model, summarizer]
    removers = [m.add_listener(_recorder(recording)) for m in models]
    view.start()
    try:
        view.status("step 1: loading the model and reading the prompt")
        async for event in agent.stream(task):
            if isinstance(event, ReplyEvent):
                result.reply = event.msg.text
    finally:
        view.stop()
        logger.removeHandler(handler)
        for remove in removers:
            remove()
        if isinstance(model, LocalChatModel):
            model.constrain = None
    result.records = guide.records
    result.answer = guide.answer
    result.provider_prompt, result.provider_cached = guide.prompt_tokens, guide.cached_tokens
    result.items = await workspace.list_items(agent.session_id)
    result.agent_cache, result.summary_cache = cache_meters(model)
    if summarizer is not model:
        result.summary_cache = cache_meters(summarizer)[0]
    result.seconds = time.monotonic() - started
    return result


def _phase(event: BackgroundCompactionEvent) -> str:
    """One line on a background summary's phase: when, how long, how long waited."""
    if event.phase == "started":
        return "started on a snapshot; the agent goes on from the full context"
    if event.phase == "ready":
        return f"ready after {event.duration_s:.1f}s; swapped in at the trigger"
    if event.phase == "applied":
        return (
            f"applied at the trigger, {event.duration_s:.1f}s after it started; the agent "
            f"waited {event.waited_s:.1f}s for it"
        )
    return f"discarded after {event.duration_s:.1f}s: {event.reason}"


def _recorder(path: Path) -> Callable[[ModelCall], None]:
    """Appends every request as sent, and its answer, to ``path`` (one JSON a line)."""

    def record(call: ModelCall) -> None:
        row = {
            "model": call.model,
            "messages": [m.model_dump(mode="json") for m in call.messages],
            "tools": [t.name for t in call.tools],
            "tool_choice": call.tool_choice,
            "response": call.response.model_dump(mode="json"),
        }
        with path.open("a", encoding="utf-8") as out:
            out.write(json.dumps(row, ensure_ascii=False) + "\n")

    return record
