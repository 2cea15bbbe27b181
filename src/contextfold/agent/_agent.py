"""Agent: the ReAct loop the context engine lives in.

This module holds its public API and wires its parts: the loop (``_loop``), tool execution
(``_tools``), holding a session (``_session``) and streaming (``_stream``). Every middleware
hook is entered here, with the agent itself as the context's ``agent``.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

from .._exceptions import ContextWindowExceededError
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
from ..message import HintBlock, Msg, ToolCallBlock, ToolResultBlock, ToolSpec
from ..middleware import (
    CompressionContext,
    Middleware,
    MiddlewareStack,
    ModelCallContext,
    ReplyContext,
    ToolCallContext,
)
from ..model import ChatModelBase, ChatResponse
from ..tool import Skill, Toolkit, load_skills, skills_prompt
from ..workspace import LocalWorkspace, MemoryWorkspace, Offloader, SessionStore, WorkspaceReader
from ._compress_tool import CompressContextTool
from ._events import AgentEvent, ContextChangeEvent
from ._idle import IdleCompaction
from ._loop import Loop, as_msgs
from ._permissions import Permissions
from ._session import Checkpoints, session_store, take_lease
from ._state import AgentState
from ._stream import EventSink, generate
from ._tasks import TaskList
from ._tools import BuiltinTools, run_calls

__all__ = ["Agent"]


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
        self._builtin = BuiltinTools()
        # Skills read once per reply (None outside a reply: read on each access).
        self._reply_skills: list[Skill] | None = None
        self._readback = readback_tools and isinstance(offloader, WorkspaceReader)
        self._add_readback_tools(config)
        if tasks_enabled:
            for task_tool in self.tasks.tools():
                self._builtin.add(task_tool)
        if config.compression_tool_enabled:
            self._builtin.add(CompressContextTool(self._compress_by_tool))
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
            # Read-back tools turned off: the engine's notes must not send the model to
            # them. An offloader that is no workspace keeps the spec's marker, which names
            # where the whole output went (the contract of tests/workspace's protocol tests).
            readback=readback_tools,
        )
        self._events = EventSink()
        self._lock = asyncio.Lock()
        cache_model = summarizer if isinstance(summarizer, ChatModelBase) else None
        self._idle = IdleCompaction(
            self._engine,
            lifetime=lambda: None if cache_model is None else cache_model.cache_lifetime,
            inputs=self._idle_inputs,
            in_turn=self._lock.locked,
            applied=self._idle_applied,
        )
        # Set while a session is held (hold_session).
        self._checkpoints = Checkpoints(lambda store: self.save_session(store))
        self._loop = Loop(self._engine, self._reason, self._act, self._checkpoints, self._events)

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
        """Save :attr:`state` as JSON to ``store`` (default: the offloader, if it is one),
        through ``ContextConfig.redact`` when one is set: the stored state holds no secret
        the live context shows (a resumed session sees them masked)."""
        state = self.state.redacted(self.context_config.redact)
        await session_store(self.offloader, store).save_state(
            self.session_id, state.model_dump_json()
        )

    async def resume_session(self, session_id: str, store: SessionStore | None = None) -> bool:
        """Load the state saved for ``session_id``; False (nothing changed) if there is none."""
        saved = await session_store(self.offloader, store).load_state(session_id)
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

        When ``store`` (default: the offloader) grants leases (``PostgresWorkspace``,
        ``SQLiteWorkspace``, ``LocalWorkspace``), the session's lease is taken first, so a
        second worker gets ``SessionLeasedError`` (after waiting up to ``wait`` seconds);
        a worker that dies stops renewing it, and after ``lease_ttl`` seconds (on
        ``LocalWorkspace``, at once) another may take over. Then the saved state is loaded
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
        store = session_store(self.offloader, store)
        sid = session_id or self.session_id
        lease = await take_lease(store, sid, ttl=lease_ttl, wait=wait)
        try:
            resumed = await self.resume_session(sid, store)
            if not resumed:
                self._use_session(sid)
            with self._checkpoints.held(store, lease):
                yield resumed
            if lease is not None:
                lease.check()
            await self.save_session(store)
        finally:
            if lease is not None:
                await lease.release()

    def _add_readback_tools(self, config: ContextConfig) -> None:
        # Scoped to the current session, so they are rebuilt when a session is loaded.
        if self._readback and isinstance(self.offloader, WorkspaceReader):
            self._builtin.add_readback(self.offloader, self.session_id, config.tool_result_limit)

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
            self._idle.turn_started()
            ctx = ReplyContext(agent=self, msg=as_msgs(msg))
            answer = await self.middleware.wrap("on_reply", ctx, self._reply_core)
            self._idle.turn_ended()
            return answer

    def __call__(self, msg: Msg | Sequence[Msg] | str | None = None) -> Awaitable[Msg]:
        """Same as :meth:`reply`."""
        return self.reply(msg)

    async def stream(
        self, msg: Msg | Sequence[Msg] | str | None = None
    ) -> AsyncIterator[AgentEvent]:
        """Like :meth:`reply`, yielding events as they happen; the last is a ``ReplyEvent``.

        Closing the iterator early cancels the reply.
        """
        events = self._events.stream(self.name, lambda: self.reply(msg))
        async with contextlib.aclosing(events):
            async for event in events:
                yield event

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
        return self._builtin.specs(self.toolkit)

    # ----------------------------------------------------------------- the loop's steps

    async def _reply_core(self, ctx: ReplyContext) -> Msg:
        self._reply_skills = self._load_skills()
        try:
            return await self._loop.run(
                as_msgs(ctx.msg) or [], name=self.name, max_iters=self.max_iters
            )
        finally:
            self._reply_skills = None

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
        return await generate(self.model, ctx, self._events, self.name)

    async def _act(self, calls: list[ToolCallBlock], step: int) -> list[ToolResultBlock]:
        return await run_calls(
            calls, lambda call: self._run_call(call, step), parallel=self.parallel_tool_calls
        )

    async def _run_call(self, call: ToolCallBlock, step: int) -> ToolResultBlock:
        ctx = ToolCallContext(agent=self, step=step, call=call)
        return await self.middleware.wrap("on_tool_call", ctx, self._tool_core)

    async def _tool_core(self, ctx: ToolCallContext) -> ToolResultBlock:
        return await self._builtin.run(ctx.call, self.toolkit, self.permissions)

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

    async def _idle_inputs(self) -> tuple[str, list[ToolSpec]]:
        return await self.build_system_prompt(), self.tool_specs()

    async def _idle_applied(self, event: CompressionEvent) -> None:
        await self._checkpoints.save()  # a held session stores the compacted state

    async def _on_context_event(self, event: ContextEvent) -> None:
        await self.middleware.context_event(event, self)
        sink = self._events.get()
        if sink is not None:
            sink(ContextChangeEvent(agent=self.name, event=event))

    def __repr__(self) -> str:
        return f"Agent(name={self.name!r}, session_id={self.session_id!r})"
