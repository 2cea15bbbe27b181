"""Drive AgentScope 2.0.11's real ``Agent`` with a replaying model and a replaying tool.

The model subclasses AgentScope's ``ChatModelBase`` and answers each reasoning call with
the next recorded assistant turn (text plus one ``bash`` tool call); structured-output
calls (context compression) are answered by the shared extractive summarizer
(``contextfold.replay.summarize_items``). The ``bash`` tool returns the recorded output.
Both are timed and their time is excluded from the framework clock, so what remains is
AgentScope's own work per step.
"""

from __future__ import annotations

import itertools
import json
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

try:
    from agentscope.agent import Agent, ContextConfig, ReActConfig
    from agentscope.credential import CredentialBase
    from agentscope.formatter import OpenAIChatFormatter
    from agentscope.message import (
        AssistantMsg,
        HintBlock,
        Msg,
        TextBlock,
        ThinkingBlock,
        ToolCallBlock,
        ToolResultBlock,
        ToolResultState,
        UserMsg,
    )
    from agentscope.model import ChatModelBase, ChatResponse
    from agentscope.permission import PermissionBehavior, PermissionDecision
    from agentscope.tool import FunctionTool, ToolChunk, Toolkit
    from agentscope.workspace import LocalWorkspace
except ImportError as exc:  # pragma: no cover - depends on the optional group
    raise ImportError(
        "The benchmarks need AgentScope: pip install 'agentscope==2.0.11' "
        "(the 'bench' optional dependency group)"
    ) from exc

from ._common import Compression, FrameworkClock, RunResult
from ._data import FINAL_TEXT, Session

Summarize = Callable[[list[tuple[str, str]], str | None], Awaitable[dict[str, str]]]
"""Writes summary fields from a span's ``(role, text)`` items and the previous summary."""

SummarizeMsgs = Callable[[list[Msg], str | None], Awaitable[dict[str, str]]]
"""Writes summary fields from a span's AgentScope messages as the agent holds them (tool
calls as ``ToolCallBlock``, results as ``ToolResultBlock``) and the previous summary."""

__all__ = [
    "VERSION",
    "Summarize",
    "SummarizeMsgs",
    "anthropic_body",
    "count_text_tokens",
    "counted_text",
    "estimate",
    "flatten",
    "is_summary",
    "render",
    "run_session",
    "snapshot",
    "to_contextfold",
    "tool_output_estimate",
]

import agentscope  # noqa: E402 - after the guarded imports above

VERSION = agentscope.__version__
_TEMPLATE = ContextConfig().summary_template


def _call_text(block: ToolCallBlock) -> str:
    try:
        data = json.loads(block.input)
    except (TypeError, ValueError):
        return str(block.input)
    if isinstance(data, dict):
        return "\n".join(str(v) for v in data.values())
    return str(data)


def _block_items(role: str, block: Any) -> list[tuple[str, str]]:
    if isinstance(block, TextBlock):
        return [(role, block.text)]
    if isinstance(block, ThinkingBlock):
        return [(role, block.thinking)]
    if isinstance(block, HintBlock):
        hint = block.hint
        text = hint if isinstance(hint, str) else "\n".join(getattr(b, "text", "") for b in hint)
        return [(role, text)]
    if isinstance(block, ToolCallBlock):
        return [("assistant", _call_text(block))]
    if isinstance(block, ToolResultBlock):
        out = block.output
        text = out if isinstance(out, str) else "\n".join(getattr(b, "text", "") for b in out)
        return [("tool", text)]
    return []


def flatten(msgs: list[Msg]) -> list[tuple[str, str]]:
    """AgentScope messages as the summarizer's neutral ``(role, text)`` items."""
    items: list[tuple[str, str]] = []
    for m in msgs:
        for b in m.get_content_blocks():
            items.extend(_block_items(m.role, b))
    return items


def render(msgs: list[Msg], tools: list[dict[str, Any]] | None) -> str:
    """A neutral text rendering of a request, for the prefix-stability figure."""
    parts = [json.dumps(tools or [], sort_keys=True)]
    for m in msgs:
        parts.append(f"<|{m.role}|>")
        for b in m.get_content_blocks():
            for _, text in _block_items(m.role, b):
                parts.append(text)
    return "\n".join(parts)


class ReplayModel(ChatModelBase):
    """Answers reasoning calls with recorded turns and compression calls by summarizing."""

    def __init__(
        self,
        session: Session,
        clock: FrameworkClock,
        *,
        context_size: int,
        record: bool,
        summarize: Summarize | None = None,
        summarize_msgs: SummarizeMsgs | None = None,
    ) -> None:
        super().__init__(
            credential=CredentialBase(),
            model="replay",
            parameters=ChatModelBase.Parameters(),
            stream=False,
            max_retries=0,
            context_size=context_size,
        )
        # The agent reads the formatter's supported media types; a replay never formats.
        self.formatter = OpenAIChatFormatter()
        self.session = session
        self.clock = clock
        self.record = record
        self.step = 0
        self.step_marks: list[float] = []
        self.compressions: list[Compression] = []
        self.requests: list[str] = []
        self.estimates: list[tuple[int, int]] = []
        self.inputs: list[tuple[list[Msg], list[dict[str, Any]] | None]] = []
        self.summarize = summarize
        self.summarize_msgs = summarize_msgs
        self.sent: list[tuple[str, str, int]] = []
        self.bodies: list[tuple[str, int, dict[str, Any]]] = []
        """(kind, step, Messages API body) of every call, as sent."""
        """Per reasoning call, taken when it was made (AgentScope mutates its messages
        afterwards): the summary's text, the rest's text and the tool calls kept."""

    async def _call_api(
        self,
        model_name: str,
        messages: list[Msg],
        tools: list[dict[str, Any]] | None = None,
        tool_choice: Any = None,
        **kwargs: Any,
    ) -> ChatResponse:
        mark = self.clock.now()
        start = time.perf_counter()
        try:
            summary_call = bool(tools) and tools[0]["function"]["name"] == (  # type: ignore[index]
                "generate_structured_output"
            )
            if self.record:
                # The request as AgentScope's own Anthropic formatter sends it, now: the
                # messages are mutated by the agent afterwards.
                kind = "summary" if summary_call else "reasoning"
                self.bodies.append((kind, self.step, await anthropic_body(messages, tools)))
            if summary_call:
                return await self._summarize(messages)
            self.step_marks.append(mark)
            if self.record:
                self.requests.append(render(messages, tools))
                self.inputs.append((messages, tools))
                self.sent.append(snapshot(messages))
            return self._next_turn()
        finally:
            self.clock.add(time.perf_counter() - start, kind="model")

    def _next_turn(self) -> ChatResponse:
        steps = self.session.steps
        if self.step >= len(steps):
            return ChatResponse(content=[TextBlock(text=FINAL_TEXT)], is_last=True)
        st = steps[self.step]
        self.step += 1
        content: list[Any] = []
        if st.thought:
            content.append(TextBlock(text=st.thought))
        content.append(
            ToolCallBlock(
                id=f"call_{self.step}", name="bash", input=json.dumps({"command": st.command})
            )
        )
        return ChatResponse(content=content, is_last=True)

    async def _summarize(self, messages: list[Msg]) -> ChatResponse:
        # messages = system, [previous summary], span..., compression prompt
        start = 1
        if len(messages) > 1 and is_summary(messages[1]):
            start = 2
        span = messages[start:-1]
        if self.summarize_msgs is not None:
            previous = messages[1].get_text_content() if start == 2 else None
            fields = await self.summarize_msgs(list(span), previous)
        elif self.summarize is not None:
            previous = messages[1].get_text_content() if start == 2 else None
            fields = await self.summarize(flatten(span), previous)
        else:
            # Imported here, not at module level: the synthetic sessions never compress,
            # and loading contextfold would add to AgentScope's memory figure.
            from contextfold.context import summarize_items

            fields = summarize_items(flatten(messages))
        self.compressions.append(
            Compression(
                span_text="\n".join(t for _, t in flatten(span)),
                # Exactly what the agent stores as its summary (before the offload reminder).
                summary_text=_TEMPLATE.format(**fields),
            )
        )
        call = ToolCallBlock(
            id=f"summary_{len(self.compressions)}",
            name="generate_structured_output",
            input=json.dumps(fields),
        )
        return ChatResponse(content=[call], is_last=True)


async def anthropic_body(messages: list[Msg], tools: list[dict[str, Any]] | None) -> dict[str, Any]:
    """A request as AgentScope 2.0.11 formats it for the Anthropic Messages API (its own
    ``AnthropicChatFormatter``; it places no ``cache_control``)."""
    from agentscope.formatter import AnthropicChatFormatter

    wire = await AnthropicChatFormatter().format(messages)
    body: dict[str, Any] = {"messages": [m for m in wire if m.get("role") != "system"]}
    system = [m for m in wire if m.get("role") == "system"]
    if system:
        body["system"] = system[0]["content"]
    if tools:
        body["tools"] = [
            {
                "name": t["function"]["name"],
                "description": t["function"].get("description", ""),
                "input_schema": t["function"].get("parameters", {}),
            }
            for t in tools
        ]
    return body


def _tool_text(output: Any) -> str:
    return output if isinstance(output, str) else "\n".join(getattr(b, "text", "") for b in output)


def to_contextfold(msgs: list[Msg]) -> list[Any]:
    """AgentScope messages as contextfold ``Msg`` objects, block for block: a tool call
    stays a ``ToolCallBlock`` with its decoded arguments, a result a ``ToolResultBlock``
    (so a summarizer reading tool traffic sees the calls, not prose about them)."""
    from contextfold import message as cf

    out: list[Any] = []
    for m in msgs:
        blocks: list[Any] = []
        for b in m.get_content_blocks():
            if isinstance(b, TextBlock):
                blocks.append(cf.TextBlock(text=b.text))
            elif isinstance(b, ThinkingBlock):
                blocks.append(cf.ThinkingBlock(thinking=b.thinking))
            elif isinstance(b, HintBlock):
                blocks.append(cf.HintBlock(hint=_tool_text(b.hint)))
            elif isinstance(b, ToolCallBlock):
                try:
                    arguments = json.loads(b.input)
                except (TypeError, ValueError):
                    arguments = {"input": str(b.input)}
                if not isinstance(arguments, dict):
                    arguments = {"input": arguments}
                blocks.append(cf.ToolCallBlock(id=b.id, name=b.name, input=arguments))
            elif isinstance(b, ToolResultBlock):
                blocks.append(cf.ToolResultBlock(id=b.id, name=b.name, output=_tool_text(b.output)))
        role = m.role if m.role in ("user", "assistant", "system") else "user"
        out.append(cf.Msg(m.name or role, blocks, role))
    return out


def snapshot(messages: list[Msg]) -> tuple[str, str, int]:
    """(summary text, text of everything else, tool calls kept) of a request as sent."""
    has_summary = len(messages) > 1 and is_summary(messages[1])
    summary = messages[1:2] if has_summary else []
    rest = [messages[0], *messages[(2 if has_summary else 1) :]]
    calls = sum(isinstance(b, ToolCallBlock) for m in rest for b in m.get_content_blocks())
    return (
        "\n".join(t for _, t in flatten(summary)),
        "\n".join(t for _, t in flatten(rest)),
        calls,
    )


def is_summary(msg: Msg) -> bool:
    """Whether ``msg`` is AgentScope's summary message (its template's opening line)."""
    text = msg.get_text_content() or ""
    return msg.role == "user" and text.startswith(_TEMPLATE.split("{", 1)[0][:40])


def _make_tool(session: Session, clock: FrameworkClock) -> FunctionTool:
    outputs = [s.output for s in session.steps]
    index = {"i": 0}

    async def bash(command: str) -> ToolChunk:
        """Run a shell command.

        Args:
            command (`str`):
                The command to run.
        """
        start = time.perf_counter()
        i = index["i"]
        index["i"] += 1
        out = outputs[i] if i < len(outputs) else ""
        chunk = ToolChunk(content=[TextBlock(text=out)], state=ToolResultState.SUCCESS)
        clock.add(time.perf_counter() - start, kind="tool")
        return chunk

    return FunctionTool(
        bash,
        name="bash",
        permission=PermissionDecision(behavior=PermissionBehavior.ALLOW, message="replay"),
    )


async def count_text_tokens(text: str) -> int:
    """AgentScope's token count of one user message holding ``text`` (its bytes/4 rule)."""
    model = ChatModelBase.count_tokens
    return await model(None, [UserMsg(name="user", content=text)], None)  # type: ignore[arg-type]


async def run_session(
    session: Session,
    *,
    context_size: int,
    record: bool = False,
    tool_result_limit: int = 3000,
    workdir: Path | None = None,
    summarize: Summarize | None = None,
    summarize_msgs: SummarizeMsgs | None = None,
) -> RunResult:
    """Replay ``session`` through AgentScope's ``Agent``; return per-step framework time.

    ``summarize(span_items, previous_summary_text)`` writes the summary fields (default:
    the shared extractive summarizer over the whole compression request);
    ``summarize_msgs(span_messages, previous_summary_text)``, when given, is called
    instead with the span's messages themselves (tool calls as tool calls).
    """
    clock = FrameworkClock()
    model = ReplayModel(
        session,
        clock,
        context_size=context_size,
        record=record,
        summarize=summarize,
        summarize_msgs=summarize_msgs,
    )
    tmp = tempfile.TemporaryDirectory(prefix="bench-as-") if workdir is None else None
    root = Path(tmp.name) if tmp else workdir
    assert root is not None
    try:
        workspace = LocalWorkspace(workdir=str(root / "ws"))
        await workspace.initialize()
        agent = Agent(
            name="replay",
            system_prompt=session.system,
            model=model,
            toolkit=Toolkit(tools=[_make_tool(session, clock)]),
            offloader=workspace,
            context_config=ContextConfig(tool_result_limit=tool_result_limit),
            react_config=ReActConfig(max_iters=len(session.steps) + 10),
        )
        wall0 = time.perf_counter()
        f0 = clock.now()
        reply = await agent.reply(UserMsg(name="user", content=session.task))
        f_end = clock.now()
        wall = time.perf_counter() - wall0
        if model.step != len(session.steps):
            raise RuntimeError(
                f"AgentScope replay of {session.name} stopped at step {model.step} of "
                f"{len(session.steps)}: {reply.get_text_content()!r}"
            )
        marks = [f0, *model.step_marks, f_end]
        overheads = [b - a for a, b in itertools.pairwise(marks)]
        result = RunResult(
            system="agentscope",
            session=session.name,
            step_overheads=overheads,
            step_history=[2 + 2 * i for i in range(len(overheads))],
            total_overhead=f_end - f0,
            model_time=clock.model_time,
            tool_time=clock.tool_time,
            wall=wall,
            compressions=model.compressions,
            requests=model.requests,
        )
        result.extra["final_summary"] = str(agent.state.summary or "")
        sessions_dir = root / "ws" / "sessions"
        if sessions_dir.exists():
            result.offload_text = "\n".join(
                p.read_text(encoding="utf-8", errors="replace")
                for p in sorted(sessions_dir.rglob("*"))
                if p.is_file()
            )
        result.extra["inputs"] = model.inputs
        result.extra["sent"] = model.sent
        result.extra["bodies"] = model.bodies
        return result
    finally:
        if tmp is not None:
            tmp.cleanup()


def counted_text(messages: list[Msg], tools: list[dict[str, Any]] | None) -> str:
    """The exact text AgentScope's ``count_tokens`` measures (its bytes/4 input)."""
    parts: list[str] = []
    for m in messages:
        for b in m.get_content_blocks():
            if isinstance(b, TextBlock):
                parts.append(b.text)
            elif isinstance(b, ThinkingBlock):
                parts.append(b.thinking)
            elif isinstance(b, HintBlock):
                h = b.hint
                parts.extend([h] if isinstance(h, str) else [getattr(x, "text", "") for x in h])
            elif isinstance(b, ToolCallBlock):
                parts.append(b.input)
            elif isinstance(b, ToolResultBlock):
                o = b.output
                parts.extend([o] if isinstance(o, str) else [getattr(x, "text", "") for x in o])
    if tools:
        parts.append(json.dumps(tools, ensure_ascii=False))
    return "".join(parts)


async def estimate(messages: list[Msg], tools: list[dict[str, Any]] | None) -> int:
    """AgentScope's own estimate for a request (``ChatModelBase.count_tokens``)."""
    return int(await ChatModelBase.count_tokens(None, messages, tools))  # type: ignore[arg-type]


async def tool_output_estimate(text: str) -> int:
    """AgentScope's count for a tool output when deciding whether to truncate it."""
    msg = AssistantMsg("replay", content=[TextBlock(text=text)])
    return int(await ChatModelBase.count_tokens(None, [msg], None))  # type: ignore[arg-type]
