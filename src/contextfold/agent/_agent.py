"""Agent: the ReAct loop the context engine lives in."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import fields
from pathlib import Path
from typing import Any

from .._exceptions import ContextWindowExceededError, EmptyResponseError
from .._logging import logger
from ..context import (
    CompressionEvent,
    CompressionRequest,
    CompressionTrigger,
    ContextConfig,
    ContextEngine,
    ContextEvent,
    ModelInput,
    ModelSummarizer,
    Summarizer,
)
from ..message import (
    READBACK_KEY,
    HintBlock,
    Msg,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
)
from ..middleware import (
    CompressionContext,
    Middleware,
    MiddlewareStack,
    ModelCallContext,
    ReplyContext,
    ToolCallContext,
)
from ..model import (
    ChatModelBase,
    ChatResponse,
    ResponseCompleted,
    TextDelta,
    ThinkingDelta,
)
from ..tool import (
    FunctionTool,
    Skill,
    SpecCache,
    Tool,
    Toolkit,
    error_result,
    load_skills,
    readback_tools,
    run_tool,
    skills_prompt,
)
from ..workspace import (
    Lease,
    LocalWorkspace,
    MemoryWorkspace,
    Offloader,
    SessionLease,
    SessionStore,
    WorkspaceReader,
)
from ._compress_tool import CompressContextTool
from ._events import (
    AgentEvent,
    ContextChangeEvent,
    ReplyEvent,
    TextDeltaEvent,
    ThinkingDeltaEvent,
    ToolCallEvent,
    ToolResultEvent,
)
from ._permissions import Permissions
from ._state import AgentState
from ._tasks import TaskList

__all__ = ["Agent"]

_Sink = Callable[[AgentEvent], None]
_CHARS_PER_TOKEN = 2
"""A low estimate of characters per token (numbered log lines measure ~2.6 with the OpenAI
tokenizer, prose ~5), so a Read sized by it rarely exceeds the limit."""
# The event sinks of the streams running in this context, by agent: set by
# ``Agent.stream`` and inherited by the tasks it spawns (parallel tool calls), so an agent
# run inside another agent's stream (as a tool, say) finds no sink of its own there.
_SINKS: ContextVar[Mapping[object, _Sink] | None] = ContextVar(
    "contextfold_agent_sinks", default=None
)


class Agent:
    """A ReAct agent: reason (model call), act (tool calls), observe, repeat.

    The model input of every step is built once by the context engine, in the three layers
    of context-management.zh, section 概述 (system prompt, summary, context); what is counted
    is what is sent.

    Example::

        agent = Agent(name="my_agent", system_prompt="...", model=model, toolkit=toolkit,
                      context_config=ContextConfig(trigger_ratio=0.8, reserve_ratio=0.1,
                                                   tool_result_limit=3000),
                      offloader=workspace)
        reply = await agent.reply(Msg("user", "...", "user"))

    Beyond the arguments of context-management.zh, section 配置 ContextConfig:
    ``summarizer`` (a model, or any :class:`~contextfold.context.Summarizer`, for
    summaries; default ``model``),
    ``middleware`` (outermost first), ``permissions``, ``skills_dir`` (default: the
    offloader's ``skills_dir`` when it has one), ``max_iters`` (reasoning steps per reply),
    ``session_id`` (default: random), ``tasks_enabled`` (TaskCreate/TaskUpdate/TaskList),
    ``readback_tools`` (Read/Grep/Glob over the offloader, when it is a workspace) and
    ``parallel_tool_calls``. Built-in tools shadow toolkit tools of the same name.
    Results of the read-back tools carry ``metadata[READBACK_KEY] = True``; the
    engine cuts them when over ``tool_result_limit`` without offloading a second copy.

    Without an ``offloader`` the agent keeps what leaves the context in a
    :class:`~contextfold.workspace.MemoryWorkspace` it can read back from (and save its
    session state to): nothing is discarded. That memory holds each offloaded message and
    tool result once, so it grows to about the size of the session's whole history, in
    JSON (images and audio deduplicated by content); for long sessions or resuming in
    another process pass a ``LocalWorkspace``, ``SQLiteWorkspace`` or ``PostgresWorkspace``.
    """

    def __init__(
        self,
        *,
        name: str,
        system_prompt: str,
        model: ChatModelBase,
        toolkit: Toolkit | None = None,
        context_config: ContextConfig | None = None,
        offloader: Offloader | None = None,
        summarizer: ChatModelBase | Summarizer | None = None,
        middleware: Sequence[Middleware] = (),
        permissions: Permissions | None = None,
        skills_dir: str | Path | None = None,
        max_iters: int = 20,
        session_id: str | None = None,
        tasks_enabled: bool = True,
        readback_tools: bool = True,
        parallel_tool_calls: bool = True,
    ) -> None:
        config = context_config or ContextConfig()
        config.check_buffer()
        if offloader is None:
            # Nothing is lost by default: what leaves the context stays readable in memory.
            offloader = MemoryWorkspace()
        if max_iters < 1:
            raise ValueError(f"max_iters must be at least 1, got {max_iters}")
        self.name = name
        self.system_prompt = system_prompt
        self.model = model
        self.toolkit = toolkit if toolkit is not None else Toolkit()
        self.middleware = MiddlewareStack(middleware)
        self.permissions = permissions or Permissions()
        if skills_dir is None and isinstance(offloader, LocalWorkspace):
            skills_dir = offloader.skills_dir
        self.skills_dir = Path(skills_dir) if skills_dir is not None else None
        self.offloader = offloader
        self.max_iters = max_iters
        self.parallel_tool_calls = parallel_tool_calls
        self.tasks = TaskList()
        self.session_id = session_id or uuid.uuid4().hex
        self._builtin: dict[str, Tool] = {}
        # The read-back tool objects (by identity), whose results are marked for the engine.
        self._readback_tools: list[Tool] = []
        self._builtin_specs = SpecCache()
        # Skills read once per reply (None outside a reply: read on each access).
        self._reply_skills: list[Skill] | None = None
        self._readback = readback_tools and isinstance(offloader, WorkspaceReader)
        self._add_readback_tools(config)
        if tasks_enabled:
            self._builtin.update((t.name, t) for t in self.tasks.tools())
        if config.compression_tool_enabled:
            tool = CompressContextTool(self._compress_by_tool)
            self._builtin[tool.name] = tool
        if summarizer is None:
            summarizer = model
        self._engine = ContextEngine(
            counter=model.token_counter,
            context_size=model.context_size,
            summarizer=(
                ModelSummarizer(summarizer) if isinstance(summarizer, ChatModelBase) else summarizer
            ),
            config=config,
            offloader=offloader,
            session_id=self.session_id,
            on_event=self._on_context_event,
            compression_hook=self._compression_hook,
        )
        self._sink_key = object()
        self._lock = asyncio.Lock()
        # Set while a session is held (hold_session): the state is saved there every step,
        # and the lease (if any) is checked before each tool call and save.
        self._checkpoints: SessionStore | None = None
        self._lease: Lease | None = None

    # ----------------------------------------------------------------- properties

    @property
    def context_config(self) -> ContextConfig:
        """The agent's context configuration."""
        return self._engine.config

    @property
    def engine(self) -> ContextEngine:
        """The context engine holding this session's summary and context."""
        return self._engine

    @property
    def summary(self) -> Msg | None:
        """The summary of compressed history, if a compression happened."""
        return self._engine.summary

    @property
    def context(self) -> list[Msg]:
        """The recent, uncompressed messages."""
        return list(self._engine.context)

    @property
    def awaiting_reply(self) -> bool:
        """Whether the session ends with a message the agent has not answered yet (a user
        message or tool results): a resumed session in this state goes on with
        ``await agent.reply()``."""
        last = self._engine.last
        return last is not None and (last.role != "assistant" or bool(last.tool_calls))

    @property
    def skills(self) -> list[Skill]:
        """Skills from the toolkit, then from ``skills_dir`` (first wins on a name clash).

        Read from disk on each access outside a reply; during a reply they are read once,
        at its start, so a skill added mid-reply is offered from the next reply on.
        """
        if self._reply_skills is not None:
            return list(self._reply_skills)
        return self._load_skills()

    def _load_skills(self) -> list[Skill]:
        merged = {s.name: s for s in self.toolkit.skills}
        for skill in load_skills(self.skills_dir) if self.skills_dir else []:
            merged.setdefault(skill.name, skill)
        return list(merged.values())

    @property
    def state(self) -> AgentState:
        """A snapshot of the session, serializable to JSON."""
        return AgentState(
            session_id=self.session_id,
            name=self.name,
            summary=self._engine.summary,
            context=list(self._engine.context),
            tasks=self.tasks.all(),
        )

    def load_state(self, state: AgentState | str | bytes) -> None:
        """Restore a session saved from :attr:`state` (an object or its JSON)."""
        if not isinstance(state, AgentState):
            state = AgentState.model_validate_json(state)
        self._use_session(state.session_id)
        self._engine.load(summary=state.summary, context=state.context)
        self.tasks.load(state.tasks)

    def _use_session(self, session_id: str) -> None:
        self.session_id = session_id
        self._engine.session_id = session_id
        self._add_readback_tools(self.context_config)

    async def save_session(self, store: SessionStore | None = None) -> None:
        """Save :attr:`state` as JSON to ``store`` (default: the offloader, if it is one)."""
        await self._session_store(store).save_state(self.session_id, self.state.model_dump_json())

    async def resume_session(self, session_id: str, store: SessionStore | None = None) -> bool:
        """Load the state saved for ``session_id``; False (nothing changed) if there is none."""
        saved = await self._session_store(store).load_state(session_id)
        if saved is None:
            return False
        self.load_state(saved)
        return True

    @contextlib.asynccontextmanager
    async def hold_session(
        self,
        session_id: str | None = None,
        store: SessionStore | None = None,
        *,
        lease_ttl: float = 30.0,
        wait: float = 0.0,
    ) -> AsyncIterator[bool]:
        """Run ``session_id`` (default: the current one) here, saving it after every step.

        When ``store`` (default: the offloader) grants leases (``PostgresWorkspace``), the
        session's lease is taken first, so a second worker gets ``SessionLeasedError``
        (after waiting up to ``wait`` seconds); a worker that dies stops renewing it, and
        after ``lease_ttl`` seconds another may take over. Then the saved state is loaded
        (the context manager yields whether there was one) and, until exit, saved after
        the incoming messages, after every stored set of tool results and after the
        answer: a tool whose result was saved is never run again by a worker that resumes.
        While held, the lease is checked before every tool call and save
        (``LeaseLostError`` once it lapsed). On a clean exit the state is saved once more
        and the lease released::

            async with agent.hold_session("task-42") as resumed:
                if not resumed:
                    await agent.reply("the task")
                elif agent.awaiting_reply:  # the last worker died mid-reply
                    await agent.reply()
        """
        store = self._session_store(store)
        sid = session_id or self.session_id
        lease = None
        if isinstance(store, SessionLease):
            lease = await store.acquire_lease(sid, ttl=lease_ttl, wait=wait)
        try:
            resumed = await self.resume_session(sid, store)
            if not resumed:
                self._use_session(sid)
            self._checkpoints, self._lease = store, lease
            try:
                yield resumed
            finally:
                self._checkpoints = self._lease = None
            if lease is not None:
                lease.check()
            await self.save_session(store)
        finally:
            if lease is not None:
                await lease.release()

    async def _checkpoint(self) -> None:
        if self._lease is not None:
            self._lease.check()
        if self._checkpoints is not None:
            await self.save_session(self._checkpoints)

    def _session_store(self, store: SessionStore | None) -> SessionStore:
        if store is not None:
            return store
        if isinstance(self.offloader, SessionStore):
            return self.offloader
        raise ValueError(
            "no session store: pass store=..., or use a workspace (e.g. LocalWorkspace) "
            "as the offloader"
        )

    def _add_readback_tools(self, config: ContextConfig) -> None:
        # Scoped to the current session, so they are rebuilt when a session is loaded.
        if self._readback and isinstance(self.offloader, WorkspaceReader):
            # Read stops early so its result usually fits tool_result_limit (at ~2
            # characters per token) and points at the next offset instead of being cut.
            funcs = readback_tools(
                self.offloader,
                session_id=self.session_id,
                max_chars=config.tool_result_limit * _CHARS_PER_TOKEN,
            )
            self._readback_tools = []
            for func in funcs:
                tool = FunctionTool(func)
                replaced = self._builtin.get(tool.name)
                if replaced is not None:
                    self._builtin_specs.forget(replaced)
                self._builtin[tool.name] = tool
                self._readback_tools.append(tool)

    @classmethod
    def from_state(cls, state: AgentState | str | bytes, **kwargs: Any) -> Agent:
        """A new agent continuing a saved session; ``kwargs`` are the constructor's.

        ``name`` defaults to the saved one; ``model``, ``system_prompt`` and tools must be
        passed again, since they are code rather than state.
        """
        if not isinstance(state, AgentState):
            state = AgentState.model_validate_json(state)
        kwargs.setdefault("name", state.name)
        kwargs["session_id"] = state.session_id
        agent = cls(**kwargs)
        agent.load_state(state)
        return agent

    # ----------------------------------------------------------------- public API

    async def reply(self, msg: Msg | Sequence[Msg] | str | None = None) -> Msg:
        """Answer ``msg``: reason and act until the model stops calling tools.

        After ``max_iters`` reasoning steps the agent stops with an assistant message that
        says so (``metadata["stop_reason"] == "max_iters"``) instead of raising.
        """
        async with self._lock:
            ctx = ReplyContext(agent=self, msg=_as_msgs(msg))
            return await self.middleware.wrap("on_reply", ctx, self._reply_core)

    def __call__(self, msg: Msg | Sequence[Msg] | str | None = None) -> Awaitable[Msg]:
        """Same as :meth:`reply`."""
        return self.reply(msg)

    async def stream(
        self, msg: Msg | Sequence[Msg] | str | None = None
    ) -> AsyncIterator[AgentEvent]:
        """Like :meth:`reply`, yielding events as they happen; the last is a ``ReplyEvent``.

        Closing the iterator early cancels the reply.
        """
        queue: asyncio.Queue[AgentEvent | None] = asyncio.Queue()

        async def run() -> None:
            _SINKS.set({**(_SINKS.get() or {}), self._sink_key: queue.put_nowait})
            try:
                final = await self.reply(msg)
                queue.put_nowait(ReplyEvent(agent=self.name, msg=final))
            finally:
                queue.put_nowait(None)

        task = asyncio.create_task(run())
        try:
            while (event := await queue.get()) is not None:
                yield event
            await task
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def compress_context(
        self,
        context_config: ContextConfig | None = None,
        instructions: HintBlock | str | None = None,
        *,
        force: bool = False,
    ) -> CompressionEvent | None:
        """Compress now if usage is over ``trigger_ratio`` (or ``force``); None if nothing done.

        ``context_config`` overrides the agent's configuration for this call only;
        ``instructions`` steer what the summary keeps.
        """
        if isinstance(instructions, str):
            instructions = HintBlock(hint=instructions)
        return await self._compress(
            trigger="manual", config=context_config, instructions=instructions, force=force
        )

    async def build_system_prompt(self) -> str:
        """The system prompt layer: base prompt, skills, then ``on_system_prompt`` hooks."""
        prompt = "\n\n".join(p for p in (self.system_prompt, skills_prompt(self.skills)) if p)
        return await self.middleware.system_prompt(prompt, self)

    def tool_specs(self) -> list[ToolSpec]:
        """The tools offered to the model: built-ins, then the toolkit's."""
        specs = [self._builtin_specs.get(t) for t in self._builtin.values()]
        specs += [s for s in self.toolkit.specs() if s.name not in self._builtin]
        return specs

    # ----------------------------------------------------------------- the loop

    async def _reply_core(self, ctx: ReplyContext) -> Msg:
        self._reply_skills = self._load_skills()
        try:
            return await self._loop(ctx)
        finally:
            self._reply_skills = None

    async def _loop(self, ctx: ReplyContext) -> Msg:
        incoming = _as_msgs(ctx.msg) or []
        for msg in incoming:
            self._engine.append(msg)
        if incoming:
            await self._checkpoint()
        for step in range(self.max_iters):
            response = await self._reason(step)
            assistant = response.to_msg(self.name)
            self._engine.append(assistant)
            calls = assistant.tool_calls
            if not calls:
                await self._checkpoint()
                return assistant
            # Events are built only for a stream listening: a plain reply skips them.
            sink = self._sink()
            if sink is not None:
                for call in calls:
                    sink(ToolCallEvent(agent=self.name, call=call, step=step))
            try:
                if self._lease is not None:
                    self._lease.check()  # a worker whose lease lapsed must not act
                results = await self._act(calls, step)
                # Stores the results in one synchronous step after any offload, so a
                # cancellation lands either before (nothing stored) or after (all stored).
                stored = await self._engine.add_tool_results(Msg.of_blocks("tool", results, "user"))
            except BaseException:
                # Keep the context provider-valid: every call gets exactly one result.
                if not _answers(self._engine.last, calls):
                    self._engine.append(Msg("tool", [_interrupted(c) for c in calls], "user"))
                raise
            await self._checkpoint()
            sink = self._sink()
            if sink is not None:
                for result in stored.tool_results:
                    sink(ToolResultEvent(agent=self.name, result=result, step=step))
        logger.info("agent %s stopped at max_iters=%d", self.name, self.max_iters)
        final = Msg(
            self.name,
            [
                TextBlock(
                    text=f"I stopped after {self.max_iters} reasoning steps (the max_iters "
                    "limit) before finishing the task. Ask me to continue, or raise max_iters."
                )
            ],
            "assistant",
            metadata={"stop_reason": "max_iters"},
        )
        self._engine.append(final)
        await self._checkpoint()
        return final

    async def _reason(self, step: int) -> ChatResponse:
        model_input = await self._prepare()
        try:
            return await self._call_model(model_input, step)
        except ContextWindowExceededError as exc:
            logger.warning("agent %s: %s; compressing and retrying once", self.name, exc)
            event = await self._compress(trigger="overflow", force=True)
            if event is None:
                raise
            try:
                return await self._call_model(await self._prepare(), step)
            except ContextWindowExceededError as again:
                raise ContextWindowExceededError(
                    f"the request still exceeds {self.model.model_name}'s context window "
                    f"after one forced compression ({event.tokens_before} -> "
                    f"{event.tokens_after} tokens counted; the provider said: {again}). "
                    "Nothing was dropped; lower tool_result_limit or reserve_ratio, or check "
                    "that the model's context_size and token counter match the provider",
                    status_code=again.status_code,
                ) from again

    async def _prepare(self) -> ModelInput:
        return await self._engine.prepare(
            await self.build_system_prompt(),
            self.tool_specs(),
            task_in_progress=self.tasks.in_progress,
        )

    async def _call_model(self, model_input: ModelInput, step: int) -> ChatResponse:
        ctx = ModelCallContext(
            agent=self,
            step=step,
            model_input=model_input,
            messages=model_input.messages(),
            tools=list(model_input.tools),
        )
        return await self.middleware.wrap("on_model_call", ctx, self._model_core)

    async def _model_core(self, ctx: ModelCallContext) -> ChatResponse:
        if self._sink() is None:
            return await self.model.generate(
                ctx.messages, tools=ctx.tools, tool_choice=ctx.tool_choice
            )
        response: ChatResponse | None = None
        async for event in self.model.stream(
            ctx.messages, tools=ctx.tools, tool_choice=ctx.tool_choice
        ):
            if isinstance(event, TextDelta):
                self._emit(TextDeltaEvent(agent=self.name, text=event.text, step=ctx.step))
            elif isinstance(event, ThinkingDelta):
                self._emit(
                    ThinkingDeltaEvent(agent=self.name, thinking=event.thinking, step=ctx.step)
                )
            elif isinstance(event, ResponseCompleted):
                response = event.response
        if response is None or not response.content:
            raise EmptyResponseError(f"{self.model.model_name} returned an empty response")
        return response

    async def _act(self, calls: list[ToolCallBlock], step: int) -> list[ToolResultBlock]:
        if not self.parallel_tool_calls or len(calls) == 1:
            return [await self._run_call(call, step) for call in calls]
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(self._run_call(call, step)) for call in calls]
        return [t.result() for t in tasks]

    async def _run_call(self, call: ToolCallBlock, step: int) -> ToolResultBlock:
        ctx = ToolCallContext(agent=self, step=step, call=call)
        return await self.middleware.wrap("on_tool_call", ctx, self._tool_core)

    async def _tool_core(self, ctx: ToolCallContext) -> ToolResultBlock:
        call = ctx.call
        builtin = self._builtin.get(call.name)
        tool = builtin or self.toolkit.get(call.name)
        # Built-ins touch only the agent's own state, so no rule may block them
        # (compress-context.zh, section 自主压缩, requires it for CompressContext); user
        # tools go through the rules.
        if builtin is None and tool is not None and call.input_error is None:
            refusal = await self.permissions.check(call)
            if refusal is not None:
                return error_result(call, refusal)
        available = [*self._builtin, *self.toolkit.names]
        result = await run_tool(tool, call, available=available)
        # By identity, not name: a user tool called "Read" is offloaded as usual.
        if tool is not None and any(tool is t for t in self._readback_tools):
            result = result.model_copy(update={"metadata": {**result.metadata, READBACK_KEY: True}})
        return result

    # ----------------------------------------------------------------- compression

    async def _compress(
        self,
        *,
        trigger: CompressionTrigger,
        config: ContextConfig | None = None,
        instructions: HintBlock | None = None,
        force: bool = False,
        threshold_ratio: float | None = None,
    ) -> CompressionEvent | None:
        return await self._engine.compress(
            await self.build_system_prompt(),
            self.tool_specs(),
            config=config or self.context_config,
            instructions=instructions,
            force=force,
            threshold_ratio=threshold_ratio,
            trigger=trigger,
        )

    async def _compression_hook(
        self,
        request: CompressionRequest,
        call_next: Callable[[CompressionRequest], Awaitable[CompressionEvent | None]],
    ) -> CompressionEvent | None:
        # Every compression the engine runs, automatic ones included, passes through the
        # on_compression middleware.
        names = [f.name for f in fields(CompressionRequest)]
        ctx = CompressionContext(agent=self, **{n: getattr(request, n) for n in names})

        async def core(ctx: CompressionContext) -> CompressionEvent | None:
            return await call_next(CompressionRequest(**{n: getattr(ctx, n) for n in names}))

        return await self.middleware.wrap("on_compression", ctx, core)

    async def _compress_by_tool(self, instructions: HintBlock | None) -> CompressionEvent | None:
        return await self._compress(
            trigger="tool",
            instructions=instructions,
            threshold_ratio=self.context_config.hint_ratio,
        )

    # ----------------------------------------------------------------- events

    async def _on_context_event(self, event: ContextEvent) -> None:
        await self.middleware.context_event(event, self)
        sink = self._sink()
        if sink is not None:
            sink(ContextChangeEvent(agent=self.name, event=event))

    def _sink(self) -> _Sink | None:
        sinks = _SINKS.get()
        return None if sinks is None else sinks.get(self._sink_key)

    def _emit(self, event: AgentEvent) -> None:
        sink = self._sink()
        if sink is not None:
            sink(event)

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, session_id={self.session_id!r})"


def _as_msgs(msg: Msg | Sequence[Msg] | str | None) -> list[Msg] | None:
    if msg is None:
        return None
    if isinstance(msg, str):
        return [Msg("user", msg, "user")]
    if isinstance(msg, Msg):
        return [msg]
    return list(msg)


def _answers(msg: Msg | None, calls: list[ToolCallBlock]) -> bool:
    """Whether ``msg`` holds the results of ``calls`` (stored before an interruption)."""
    if msg is None:
        return False
    answered = {r.id for r in msg.tool_results}
    return all(c.id in answered for c in calls)


def _interrupted(call: ToolCallBlock) -> ToolResultBlock:
    return error_result(call, "Error: the tool call was interrupted before it finished.")
