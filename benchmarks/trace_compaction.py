"""The functions one automatic compaction runs, and the hops between modules (issue 25).

Run: ``python -m benchmarks.trace_compaction [--verbose]``. An engine with an exact token
counter, a memory workspace and a small window takes a user task, then assistant tool calls
and their results, one model input per step, until its second automatic compaction; exactly
the :meth:`~contextfold.context.ContextEngine.prepare` call that runs it is traced (call
events only), once with ``LayerConfig(update="append")`` (the default: a part is added to the
summary the first compaction wrote) and once with ``"rewrite"``.

Counted by the file a function's code lives in, so renaming or splitting modules needs no
change here: the distinct named functions (comprehensions, lambdas and generated code left
out) under ``context/`` and in all of ``contextfold``; the ``context/`` modules they live
in; the hops, calls whose caller (the nearest ``contextfold`` frame below the callee) lives
in another module, within ``context/`` and within ``contextfold``; and the module switches,
consecutive calls under ``context/`` in call order whose files differ (a return to the
caller's file counts too). A coroutine resumed after an ``await`` is not a new call. Only
public APIs are used, so the figures compare before and after a refactor of the engine.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import contextfold
from contextfold.context import (
    ContextConfig,
    ContextEngine,
    ExtractiveSummarizer,
    LayerConfig,
    Summarizer,
    SummaryRequest,
    SummaryResult,
)
from contextfold.message import Msg, TextBlock, ToolCallBlock, ToolResultBlock, ToolSpec
from contextfold.token import counter_for_model
from contextfold.workspace import MemoryWorkspace

Mode = Literal["append", "rewrite"]

ROOT = Path(contextfold.__file__).resolve().parent
"""The package's source directory: every function whose file is under it is traced."""
CONTEXT = "context"
"""The package (a directory under ``ROOT``) whose functions and modules are reported."""

SYSTEM = "You are a coding agent. Fix the failing test with the bash tool."
TOOLS = [ToolSpec(name="bash", description="Run one bash command.")]
WINDOW = 6_000
"""Small enough that a compaction comes after a dozen steps, large enough that the
summary layer has room to take a part the second time."""
MAX_STEPS = 200
_RESUMABLE = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


@dataclass
class Trace:
    """What one traced call ran."""

    calls: list[tuple[str, str]] = field(default_factory=list)
    """Every named function call in ``contextfold``, in order: (module file, qualified name)."""
    hops: list[tuple[tuple[str, str], tuple[str, str]]] = field(default_factory=list)
    """Every call whose caller lives in another ``contextfold`` file: (caller, callee),
    each a (module file, qualified name)."""

    def functions(self, package: str = "") -> set[tuple[str, str]]:
        """Distinct functions called whose file is under ``package`` ("" for all)."""
        return {call for call in self.calls if _inside(call[0], package)}

    def modules(self, package: str) -> set[str]:
        """Distinct files under ``package`` the called functions live in."""
        return {module for module, _ in self.functions(package)}

    def hop_count(self, package: str = "") -> int:
        """Hops whose caller and callee are both under ``package`` ("" for all)."""
        return len(self.hops_within(package))

    def hops_within(self, package: str = "") -> list[tuple[tuple[str, str], tuple[str, str]]]:
        """The hops whose caller and callee are both under ``package`` ("" for all)."""
        return [h for h in self.hops if _inside(h[0][0], package) and _inside(h[1][0], package)]

    def switches(self, package: str = "") -> int:
        """Module changes between consecutive calls under ``package``, in call order: a
        reader following the trace file by file (a return to the caller's file counts)."""
        modules = [module for module, _ in self.calls if _inside(module, package)]
        return sum(1 for a, b in pairwise(modules) if a != b)


@dataclass(frozen=True)
class Figures:
    """One mode's row of the table."""

    mode: Mode
    context_functions: int
    all_functions: int
    context_modules: int
    hops: int
    context_hops: int
    context_switches: int
    summarizer_calls: int
    appended: bool
    """Whether the new summary starts with the previous one (a part was appended)."""


def _inside(module: str, package: str) -> bool:
    return not package or module.startswith(package + "/")


def _module(frame: FrameType) -> str | None:
    """The file of ``frame``'s code relative to ``ROOT`` (``None`` outside ``contextfold``)."""
    try:
        return Path(frame.f_code.co_filename).resolve().relative_to(ROOT).as_posix()
    except ValueError:
        return None


class _Tracer:
    """A profile function recording :class:`Trace` (``sys.setprofile``, call events only)."""

    def __init__(self) -> None:
        self.trace = Trace()
        self._modules: dict[str, str | None] = {}
        self._seen: set[FrameType] = set()  # held alive, so a frame is never reused

    def module(self, frame: FrameType) -> str | None:
        path = frame.f_code.co_filename
        if path not in self._modules:
            self._modules[path] = _module(frame)
        return self._modules[path]

    def __call__(self, frame: FrameType, event: str, arg: Any) -> None:
        if event != "call":
            return
        if frame.f_code.co_flags & _RESUMABLE:
            if frame in self._seen:
                return  # a resumed coroutine or generator is the same call
            self._seen.add(frame)
        callee = self.module(frame)
        name = frame.f_code.co_qualname
        if callee is None or frame.f_code.co_name.startswith("<"):
            return
        self.trace.calls.append((callee, name))
        caller = frame.f_back
        while caller is not None and self.module(caller) is None:
            caller = caller.f_back
        if caller is not None and self.module(caller) != callee:
            source = (self.module(caller) or "", caller.f_code.co_qualname)
            self.trace.hops.append((source, (callee, name)))


class _Counting:
    """The extractive summarizer, counting how often it is asked."""

    def __init__(self) -> None:
        self.inner: Summarizer = ExtractiveSummarizer()
        self.calls = 0

    async def summarize(self, request: SummaryRequest) -> SummaryResult:
        self.calls += 1
        return await self.inner.summarize(request)


def _step(i: int) -> tuple[Msg, Msg]:
    """An assistant tool call and its result, about 250 tokens together, with few facts
    (one file, one command, one error), so the ledger leaves room to append a part."""
    call = ToolCallBlock(id=f"call_{i}", name="bash", input={"command": "pytest -q tests"})
    assistant = Msg(
        "assistant",
        [TextBlock(text=f"THOUGHT: attempt {i}; run the tests again after the change."), call],
        "assistant",
    )
    output = "".join(
        f"case {n} of attempt {i}: the parser still reads the old option name\n" for n in range(12)
    )
    output += "FAILED tests/test_parse.py - KeyError: 'timeout'\n"
    result = Msg("tool", [ToolResultBlock(id=call.id, name="bash", output=output)], "user")
    return assistant, result


async def _traced(call: Callable[[], Awaitable[Any]], tracer: _Tracer) -> Any:
    previous = sys.getprofile()
    sys.setprofile(tracer)
    try:
        return await call()
    finally:
        sys.setprofile(previous)


async def trace_compaction(mode: Mode, *, nth: int = 2) -> tuple[Trace, Figures]:
    """Run steps until the ``nth`` automatic compaction and trace the ``prepare`` that ran it."""
    summarizer = _Counting()
    engine = ContextEngine(
        counter=counter_for_model("gpt-4o"),
        context_size=WINDOW,
        summarizer=summarizer,
        config=ContextConfig(layer=LayerConfig(update=mode)),
        offloader=MemoryWorkspace(),
    )
    engine.append(Msg("user", "Fix the KeyError in src/app: the test test_parse fails.", "user"))
    await engine.prepare(SYSTEM, TOOLS)
    done = 0
    for i in range(MAX_STEPS):
        assistant, result = _step(i)
        engine.append(assistant)
        await engine.add_tool_results(result)
        asked, previous = summarizer.calls, engine.summary
        tracer = _Tracer()
        await _traced(lambda: engine.prepare(SYSTEM, TOOLS), tracer)
        if engine.summary is previous:
            continue  # no compaction (each one writes a new summary)
        done += 1
        if done < nth:
            continue
        trace = tracer.trace
        summary = engine.summary
        appended = (
            previous is not None and summary is not None and summary.text.startswith(previous.text)
        )
        return trace, Figures(
            mode=mode,
            context_functions=len(trace.functions(CONTEXT)),
            all_functions=len(trace.functions()),
            context_modules=len(trace.modules(CONTEXT)),
            hops=trace.hop_count(),
            context_hops=trace.hop_count(CONTEXT),
            context_switches=trace.switches(CONTEXT),
            summarizer_calls=summarizer.calls - asked,
            appended=appended,
        )
    raise RuntimeError(f"no compaction number {nth} in {MAX_STEPS} steps")


def table(rows: list[Figures]) -> str:
    """The figures as a Markdown table, one column per mode."""
    measures: list[tuple[str, Callable[[Figures], object]]] = [
        ("named functions in `context/`", lambda r: r.context_functions),
        ("`context/` modules they live in", lambda r: r.context_modules),
        ("hops between `context/` modules (calls)", lambda r: r.context_hops),
        ("module switches in `context/`, in call order", lambda r: r.context_switches),
        ("named functions in `contextfold`", lambda r: r.all_functions),
        ("hops between `contextfold` modules (calls)", lambda r: r.hops),
        ("summarizer calls", lambda r: r.summarizer_calls),
        ("a part appended to the summary", lambda r: "yes" if r.appended else "no"),
    ]
    lines = [
        "| one automatic compaction | " + " | ".join(f"`{r.mode}`" for r in rows) + " |",
        "|---|" + "---:|" * len(rows),
    ]
    for label, value in measures:
        lines.append(f"| {label} | " + " | ".join(str(value(r)) for r in rows) + " |")
    return "\n".join(lines)


async def run() -> list[tuple[Trace, Figures]]:
    """Both modes, ``append`` first."""
    return [await trace_compaction(mode) for mode in ("append", "rewrite")]


def details(trace: Trace, mode: Mode) -> str:
    """The functions by module and the hops by edge, with how often each was taken."""
    lines = [f"{mode}: functions by module"]
    by_module: dict[str, list[str]] = {}
    for module, name in sorted(trace.functions()):
        by_module.setdefault(module, []).append(name)
    for module, names in by_module.items():
        lines.append(f"  {module} ({len(names)}): {', '.join(names)}")
    lines.append(f"{mode}: hops (caller -> callee), times taken")
    for ((caller, source), (callee, target)), n in Counter(trace.hops).items():
        lines.append(f"  {n:4d}  {caller}:{source} -> {callee}:{target}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.trace_compaction")
    parser.add_argument("--verbose", action="store_true", help="list the functions and hops")
    args = parser.parse_args(argv)
    results = asyncio.run(run())
    print(table([figures for _, figures in results]))
    if args.verbose:
        for trace, figures in results:
            print("\n" + details(trace, figures.mode))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
