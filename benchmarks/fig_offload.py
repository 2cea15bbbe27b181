"""Figure 3: offload cost as the offloaded context grows.

Both workspaces receive the same sequence of ``offload_context`` calls (one call per
compression, each with a span of recorded messages). AgentScope's ``LocalWorkspace``
reads the whole ``context.jsonl`` and writes it back on every call, so a call costs time
proportional to the file; ours should append.
"""

from __future__ import annotations

import inspect
import tempfile
import time
from pathlib import Path

from agentscope.message import AssistantMsg, TextBlock
from agentscope.workspace import LocalWorkspace as RefWorkspace

from . import _contextfold as contextfold_side
from ._common import Options, Pending, fmt_ms, median
from ._data import load_swebench

__all__ = ["run"]

SPAN = 20  # messages per offload call, about one compression's span


def _texts(limit: int) -> list[str]:
    texts: list[str] = []
    for s in load_swebench():
        for st in s.steps:
            texts.append(f"{st.thought}\n{st.command}\n{st.output}"[:4000])
            if len(texts) >= limit:
                return texts
    return texts


def _disk_size(root: Path) -> int:
    if not root.exists():
        return 0
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _report(name: str, times: list[float], sizes: list[int], n_msgs: int) -> str:
    calls = len(times)
    q = max(1, calls // 10)
    first, last = median(times[:q]), median(times[-q:])
    total = sum(times)
    return (
        f"| {name} | {calls} | {sizes[-1] / 1e6:.1f} MB | {fmt_ms(first)} | {fmt_ms(last)} "
        f"({last / first:.1f}x) | {total:.2f} s | {n_msgs / total:,.0f} | "
        f"{sizes[-1] / n_msgs:,.0f} |"
    )


async def _reference(texts: list[str], calls: int, root: Path) -> str:
    ws = RefWorkspace(workdir=str(root))
    await ws.initialize()
    times: list[float] = []
    sizes: list[int] = []
    path = root / "sessions" / "s1" / "context.jsonl"
    for c in range(calls):
        span = [
            AssistantMsg("agent", content=[TextBlock(text=texts[(c * SPAN + i) % len(texts)])])
            for i in range(SPAN)
        ]
        t0 = time.perf_counter()
        await ws.offload_context("s1", msgs=span)
        times.append(time.perf_counter() - t0)
        sizes.append(path.stat().st_size)
    return _report("AgentScope LocalWorkspace", times, sizes, calls * SPAN)


async def _ours(texts: list[str], calls: int, root: Path, backend: str) -> str:
    try:
        from contextfold.message import Msg
        from contextfold.message import TextBlock as CfText
    except ImportError as exc:
        raise Pending(str(exc)) from exc
    ws = await contextfold_side.make_workspace(root, backend=backend)
    times: list[float] = []
    sizes: list[int] = []
    raw = 0
    for c in range(calls):
        span = [
            Msg("agent", [CfText(text=texts[(c * SPAN + i) % len(texts)])], "assistant")
            for i in range(SPAN)
        ]
        raw += sum(len(m.model_dump_json()) for m in span)
        t0 = time.perf_counter()
        await ws.offload_context("s1", span)
        times.append(time.perf_counter() - t0)
        sizes.append(_disk_size(root) or raw)
    close = getattr(ws, "close", None)
    if close is not None:
        res = close()
        if inspect.isawaitable(res):
            await res
    return _report(f"contextfold {type(ws).__name__}", times, sizes, calls * SPAN)


async def run(opts: Options) -> str:
    calls = 100 if opts.quick else 400
    texts = _texts(2000)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-off-") as tmp:
        rows.append(await _reference(texts, calls, Path(tmp) / "ref"))
        for backend in ("local", "sqlite", "memory"):
            try:
                rows.append(await _ours(texts, calls, Path(tmp) / backend, backend))
            except Pending as exc:
                rows.append(f"| contextfold {backend} | pending: {exc} | | | | | | |")
            except Exception as exc:
                rows.append(
                    f"| contextfold {backend} | failed: {type(exc).__name__}: {exc} | | | | | | |"
                )
    return (
        "## Figure 3: offload\n\n"
        f"{calls} `offload_context` calls of {SPAN} recorded messages each (one call per "
        "compression), into one session, timed per call. Our file backends fsync each "
        "append (their default); AgentScope's does not. The memory backend's size is the "
        "JSON it was given.\n\n"
        "| backend | calls | final size | per call, first 10% | per call, last 10% (growth) | "
        "total | messages/s | bytes/message |\n|---|---:|---:|---:|---:|---:|---:|---:|\n"
        + "\n".join(rows)
        + "\n"
    )
