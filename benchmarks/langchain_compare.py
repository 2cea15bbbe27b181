"""LangChain's SummarizationMiddleware against ContextfoldMiddleware, in one create_agent loop.

``python -m benchmarks.langchain_compare [--runs N] [--context-size 16000]
[--summarizer local|extractive]``

Both replay the recorded SWE-bench runs in the same LangChain v1 ``create_agent`` loop: a
replaying chat model answers each call with the run's recorded turn (its thought and bash
command), the ``bash`` tool returns the recorded output. Both summarize with the same
model, the embedded SmolLM2-135M served by llama.cpp's OpenAI-compatible server on
loopback (``--summarizer local``), or the same deterministic extractive summarizer
(``--summarizer extractive``: contextfold's ``summarize_items`` over each side's messages,
for LangChain through its ``summarizer=`` callable). What each sends the model is
recorded (OpenAI wire form, one request per model call) with where compressions
happened, and measured with the exact o200k counter:
requests over the window, orphaned tool messages (a result without its call, or a call
without its result before the last message), tokens sent, and retention in the request as
sent by the independent retention grader (``benchmarks/_grader.py``, figure 4's rules).

For the grader the summary layer of a request is found by position, not by text: once a
run has compressed, it is the user messages between the system prompt and the first
assistant message (both middlewares put their summary there, and neither keeps the task
message after a compression); before that, no summary. Call ``i`` of a run precedes
recorded step ``i``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ._data import FINAL_TEXT, SWEBENCH_DIR, Session, load_swebench
from ._grader import FACT_KINDS, Grade, SentRequest, grade
from ._whole_run import Retention, grade_whole_run, load_recording, view_from_texts
from .fig_retention import wire_text

_GAVE_UP = "Previous conversation was too long to summarize"
"""What SummarizationMiddleware writes when its trimmed span starts on no human message."""
SUMMARY_MAX_TOKENS = 256
SERVER_CONTEXT = 8192
SUMMARIZER_CONTEXT = 4096
"""What our summarizer fits its request into (the server has room to spare)."""


def _replaying_model(session: Session, log: list[list[dict[str, Any]]]) -> Any:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, convert_to_openai_messages
    from langchain_core.outputs import ChatGeneration, ChatResult

    class Replaying(BaseChatModel):
        """Answers call ``i`` with the run's recorded turn ``i``; records each request."""

        calls: int = 0

        @property
        def _llm_type(self) -> str:
            return "replaying"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            log.append(convert_to_openai_messages(messages))  # type: ignore[arg-type]
            i = self.calls
            self.calls += 1
            if i < len(session.steps):
                step = session.steps[i]
                call = {"name": "bash", "args": {"command": step.command}, "id": f"call_{i}"}
                message = AIMessage(content=step.thought, tool_calls=[call])
            else:
                message = AIMessage(content=FINAL_TEXT)
            return ChatResult(generations=[ChatGeneration(message=message)])

        async def _agenerate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            return self._generate(messages, stop)

    return Replaying()


def _bash(session: Session) -> Any:
    from langchain_core.tools import StructuredTool

    outputs = iter(step.output for step in session.steps)

    def bash(command: str) -> str:
        """Run a shell command.

        Args:
            command: The command line.
        """
        return next(outputs, "")

    return StructuredTool.from_function(bash, parse_docstring=True)


def _items(messages: list[Any]) -> list[tuple[str, str]]:
    """LangChain messages as the shared summarizer's ``(role, text)`` items."""
    from langchain_core.messages import AIMessage, ToolMessage

    items = []
    for m in messages:
        if isinstance(m, AIMessage):
            calls = "\n".join(str(c["args"].get("command", "")) for c in m.tool_calls)
            items.append(("assistant", "\n".join(p for p in (m.text, calls) if p)))
        elif isinstance(m, ToolMessage):
            items.append(("tool", m.text))
        else:
            items.append(("system" if m.type == "system" else "user", m.text))
    return items


def _extractive_text(messages: list[Any]) -> str:
    from contextfold.context import DEFAULT_SUMMARY_TEMPLATE, render_summary, summarize_items

    return render_summary(DEFAULT_SUMMARY_TEMPLATE, summarize_items(_items(messages)))


def _middleware(
    system: str,
    base_url: str | None,
    context_size: int,
    compressions: list[int],
    log: list[Any],
) -> Any:
    if system == "drop-oldest":
        return _drop_oldest(int(0.8 * context_size), compressions, log)
    if system == "langchain-clear":
        from langchain.agents.middleware import ClearToolUsesEdit, ContextEditingMiddleware

        # its documented edit, the trigger scaled to this window (its default is 100,000)
        return ContextEditingMiddleware(edits=[ClearToolUsesEdit(trigger=int(0.8 * context_size))])
    if system.startswith("langchain"):
        from langchain.agents.middleware import SummarizationMiddleware
        from langchain_openai import ChatOpenAI

        # 4000 is its default; ``None`` is what its docs say to pass to skip the trimming
        trim = 4000 if system == "langchain" else None
        if base_url is None:
            return SummarizationMiddleware(
                ChatOpenAI(model="unused", api_key="unused"),  # for its counter; never called
                summarizer=_extractive_text,
                trigger=("tokens", int(0.8 * context_size)),
                keep=("tokens", int(0.1 * context_size)),
                trim_tokens_to_summarize=trim,
            )
        model = ChatOpenAI(
            model="smollm2",
            base_url=base_url,
            api_key="unused",
            temperature=0,
            extra_body={"max_tokens": SUMMARY_MAX_TOKENS},
            timeout=900,
        )
        return SummarizationMiddleware(
            model,
            trigger=("tokens", int(0.8 * context_size)),
            keep=("tokens", int(0.1 * context_size)),
            trim_tokens_to_summarize=trim,
        )
    from contextfold.context import (
        CompressionEvent,
        ContextConfig,
        ExtractiveSummarizer,
        ModelSummarizer,
    )
    from contextfold.integrations.langchain import ContextfoldMiddleware
    from contextfold.model import OpenAIChatModel
    from contextfold.token import LlamaTokenCounter, OpenAITokenCounter
    from contextfold.workspace import MemoryWorkspace

    def on_event(event: Any) -> None:
        if isinstance(event, CompressionEvent):
            compressions.append(len(log))  # the next request is the first after it
            if event.method == "truncation":
                compressions.append(-1)  # marks the one before as a failed summary

    if base_url is None:
        return ContextfoldMiddleware(
            counter=OpenAITokenCounter("o200k_base"),
            context_size=context_size,
            summarizer=ExtractiveSummarizer(),
            offloader=MemoryWorkspace(),
            config=ContextConfig(tool_result_limit=context_size // 4),
            on_event=on_event,
        )
    summarizer = OpenAIChatModel(
        "smollm2",
        base_url=base_url,
        context_size=SUMMARIZER_CONTEXT,
        max_tokens=SUMMARY_MAX_TOKENS,
        temperature=0.0,
        seed=7,
        timeout=900,
        token_counter=LlamaTokenCounter(framing="server"),
    )
    return ContextfoldMiddleware(
        counter=OpenAITokenCounter("o200k_base"),
        context_size=context_size,
        summarizer=ModelSummarizer(summarizer),
        offloader=MemoryWorkspace(),
        config=ContextConfig(tool_result_limit=context_size // 4),
        on_event=on_event,
    )


def _drop_oldest(budget: int, compressions: list[int], log: list[Any]) -> Any:
    """The trivial strategy: the task and the newest messages that fit ``budget`` tokens
    (LangChain's own approximate counter), oldest dropped first; never a tool result
    without its call. The agent's state keeps everything; only the request is cut."""
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import ToolMessage
    from langchain_core.messages.utils import count_tokens_approximately

    dropped = [0]

    def cut(messages: list[Any]) -> list[Any]:
        head, tail = messages[:1], list(messages[1:])
        start = 0
        while start < len(tail) and count_tokens_approximately(head + tail[start:]) > budget:
            start += 1
        while start < len(tail) and isinstance(tail[start], ToolMessage):
            start += 1
        if start > dropped[0]:
            compressions.append(len(log))  # the next request is the first after it
        dropped[0] = start
        return head + tail[start:]

    class DropOldest(AgentMiddleware):  # type: ignore[type-arg]
        async def awrap_model_call(self, request: Any, handler: Any) -> Any:
            return await handler(request.override(messages=cut(request.messages)))

    return DropOldest()


def _cleared(request: list[dict[str, Any]]) -> int:
    return sum(1 for m in request if m.get("role") == "tool" and m.get("content") == "[cleared]")


def _langchain_compressions(requests: list[list[dict[str, Any]]]) -> list[int]:
    """Requests shorter than the one before: messages were replaced by a summary."""
    return [i for i in range(1, len(requests)) if len(requests[i]) < len(requests[i - 1])]


def measure(
    requests: list[list[dict[str, Any]]], tools: list[Any], context_size: int
) -> dict[str, Any]:
    """Over-window requests, orphaned tool messages and tokens sent, counted with o200k."""
    from contextfold.message import from_openai_messages
    from contextfold.token import OpenAITokenCounter

    counter = OpenAITokenCounter("o200k_base")
    sizes, orphans = [], 0
    for request in requests:
        msgs = from_openai_messages(request, strict=False)
        sizes.append(counter.count_request(msgs, tools))
        calls = [c.id for m in msgs for c in m.tool_calls]
        results = [r.id for m in msgs for r in m.tool_results]
        orphans += sum(1 for r in results if r not in calls)
        answered = set(results)
        last_calls = {c.id for c in msgs[-1].tool_calls} if msgs else set()
        orphans += sum(1 for c in calls if c not in answered and c not in last_calls)
    return {
        "requests": len(requests),
        "over_window": sum(1 for s in sizes if s > context_size),
        "orphaned_tool_messages": orphans,
        "tokens_sent": sum(sizes),
        "peak": max(sizes, default=0),
    }


async def run_one(
    session: Session, system: str, base_url: str | None, context_size: int
) -> dict[str, Any]:
    from langchain.agents import create_agent
    from langchain_core.messages import HumanMessage

    from contextfold.message import ToolSpec

    requests: list[list[dict[str, Any]]] = []
    compressions: list[int] = []
    agent = create_agent(
        _replaying_model(session, requests),
        tools=[_bash(session)],
        system_prompt=session.system,
        middleware=[_middleware(system, base_url, context_size, compressions, requests)],
    )
    started = time.perf_counter()
    error = None
    try:
        await agent.ainvoke(
            {"messages": [HumanMessage(session.task)]},
            config={
                "recursion_limit": 4 * len(session.steps) + 20,
                "configurable": {"thread_id": session.name},
            },
        )
    except Exception as exc:  # a failed run is reported, not hidden
        error = f"{type(exc).__name__}: {exc}"[:300]
    tools = [
        ToolSpec(
            name="bash",
            parameters={"type": "object", "properties": {"command": {"type": "string"}}},
        )
    ]
    if system == "langchain-clear":
        compressions = [
            i for i in range(1, len(requests)) if _cleared(requests[i]) > _cleared(requests[i - 1])
        ]
        failed = 0
    elif system.startswith("langchain"):
        compressions = _langchain_compressions(requests)
        failed = sum(
            1
            for i in compressions
            if any(_GAVE_UP in str(m.get("content", "")) for m in requests[i][:3])
        )
    elif system == "drop-oldest":
        failed = 0
    else:
        failed = compressions.count(-1)
        compressions = [i for i in compressions if i >= 0]
    return {
        "run": session.name,
        "system": system,
        "seconds": round(time.perf_counter() - started, 1),
        "error": error,
        "compressions_at": compressions,
        "failed_summaries": failed,
        **measure(requests, tools, context_size),
        "wire": requests,
    }


def sent_requests(
    wire: list[list[dict[str, Any]]], compressions_at: list[int]
) -> list[SentRequest]:
    """The grader's view of each request a run sent (see the module docstring)."""
    first = min(compressions_at, default=len(wire))
    sent = []
    for i, messages in enumerate(wire):
        head = 1 if messages and messages[0].get("role") == "system" else 0
        end = head
        if i >= first:
            while end < len(messages) and messages[end].get("role") == "user":
                end += 1
        summary = "\n".join(wire_text(m) for m in messages[head:end])
        rest = [*messages[:head], *messages[end:]]
        sent.append(
            SentRequest(
                step=i,
                summary=summary,
                rest="\n".join(wire_text(m) for m in rest),
                kept_steps=sum(m.get("role") == "assistant" for m in messages),
            )
        )
    return sent


def retention(results: list[dict[str, Any]], system: str, context_size: int) -> Grade:
    """The retention grade of one system over the runs in ``results``."""
    sessions = {s.name: s for s in load_swebench()}
    total = Grade()
    for r in results:
        if r["system"] == system:
            sent = sent_requests(r["wire"], r["compressions_at"])
            total.add(grade(sessions[r["run"]], sent, window=context_size))
    return total


def _retention_cell(g: Grade) -> str:
    cells = []
    for kind in FACT_KINDS:
        rate = g.rate(kind)
        graded = g.facts[kind] - g.elsewhere[kind]
        shown = "n/a" if rate is None else f"{100 * rate:.1f}%"
        cells.append(f"{kind} {shown} ({g.kept[kind]}/{graded})")
    return ", ".join(cells)


HEADER = (
    "| system | runs | requests | over the window | orphaned tool messages | tokens sent "
    "| median peak | compressions | of which no summary "
    "| retention over the whole run (kept / graded) "
    "| retention in the next request's summary (kept / graded) |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)
LABELS = {
    "drop-oldest": "drop oldest (trivial: the task and the newest messages under the trigger)",
    "langchain": "LangChain `SummarizationMiddleware`, default `trim_tokens_to_summarize=4000`",
    "langchain-full": "LangChain `SummarizationMiddleware(trim_tokens_to_summarize=None)`",
    "langchain-clear": "LangChain `ContextEditingMiddleware(edits=[ClearToolUsesEdit(...)])`",
    "contextfold": "`ContextfoldMiddleware`",
}
SYSTEMS = tuple(LABELS)


def whole_run(results: list[dict[str, Any]], system: str) -> Retention:
    """Whole-run retention (``benchmarks/_whole_run.py``): a fact of a compressed message is
    lost if any later request lacks it, wherever in the request."""
    total = Retention()
    for r in results:
        if r["system"] != system:
            continue
        recording = load_recording(SWEBENCH_DIR / f"{r['run']}.traj.json")
        views = [
            view_from_texts(s.step, [s.rest], [s.summary] if s.summary else [])
            for s in sent_requests(r["wire"], r["compressions_at"])
        ]
        total.add(grade_whole_run(recording, views))
    return total


def _whole_run_cell(r: Retention) -> str:
    cells = []
    for kind in ("paths", "commands", "error lines"):
        rate = r.kept_rate(kind)
        shown = "n/a" if rate is None else f"{100 * rate:.1f}%"
        cells.append(f"{kind} {shown} ({r.graded[kind] - r.lost[kind]}/{r.graded[kind]})")
    return ", ".join(cells)


def table(results: list[dict[str, Any]], context_size: int = 16_000) -> str:
    """The markdown table of the comparison, one row per system."""
    rows = [HEADER]
    for system, label in LABELS.items():
        mine = [r for r in results if r["system"] == system]
        if not mine:
            continue
        cells = [
            label,
            str(len(mine)),
            f"{sum(r['requests'] for r in mine):,}",
            f"{sum(r['over_window'] for r in mine):,}",
            f"{sum(r['orphaned_tool_messages'] for r in mine):,}",
            f"{sum(r['tokens_sent'] for r in mine):,}",
            f"{statistics.median([r['peak'] for r in mine] or [0]):,.0f}",
            str(sum(len(r["compressions_at"]) for r in mine)),
            str(sum(r["failed_summaries"] for r in mine)),
            _whole_run_cell(whole_run(results, system)),
            _retention_cell(retention(results, system, context_size)),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


async def main_async(args: argparse.Namespace, log: Path) -> list[dict[str, Any]]:
    sessions = load_swebench(args.runs)
    base_url = args.base_url
    results: list[dict[str, Any]] = []

    async def go(url: str | None) -> None:
        for session in sessions:
            for system in args.systems.split(","):
                result = await run_one(session, system, url, args.context_size)
                results.append(result)
                print(
                    f"{session.name} {system}: {result['requests']} requests, "
                    f"{result['over_window']} over, {result['orphaned_tool_messages']} orphans, "
                    f"{len(result['compressions_at'])} compressions, {result['seconds']} s"
                    + (f", ERROR {result['error']}" if result["error"] else ""),
                    file=sys.stderr,
                    flush=True,
                )

    if args.summarizer == "extractive":
        await go(None)
    elif base_url is None:
        from tests.llama_server_process import llama_server_process

        from contextfold.model import embedded_model_path

        with llama_server_process(embedded_model_path(), log, n_ctx=SERVER_CONTEXT) as url:
            await go(url)
    else:
        await go(base_url)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.langchain_compare", description=__doc__
    )
    parser.add_argument("--runs", type=int, default=None, help="the first N runs (default: all 44)")
    parser.add_argument("--context-size", type=int, default=16_000)
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help=f"comma-separated, of {', '.join(SYSTEMS)}"
    )
    parser.add_argument("--summarizer", choices=["local", "extractive"], default="local")
    parser.add_argument("--base-url", help="a running llama.cpp server (default: start one)")
    parser.add_argument(
        "--json", default="langchain_compare.json", help="requests and figures per run"
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.llama_server_process
    log = Path(tempfile.mkdtemp()) / "llama.log"
    results = asyncio.run(main_async(args, log))
    Path(args.json).write_text(json.dumps(results), encoding="utf-8")
    print(table(results, args.context_size))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
