"""Figure 4: what the model still knows after compaction, in the request as sent.

For every compression of a replay, the facts of the compressed span (paths and commands of
the recorded tool calls, exception lines of the recorded tracebacks: ``_grader``'s rules,
independent of contextfold's ledger and summarizers) are looked up in the summary layer of
the next request the model is sent. Facts that the system prompt or the kept messages of
that request still hold are reported apart and not counted. Both systems replay the same
44 recorded SWE-bench runs at a 16,000-token window with ``tool_result_limit=3000``, each
with the same summarizer: ``none`` (all five fields empty: what the framework itself keeps),
``extractive`` (contextfold's deterministic summarizer), and ``local`` (the embedded
SmolLM2-135M through contextfold's ``ModelSummarizer``, on a subset of runs: it is slow).
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._common import Options, o200k_count
from ._data import SWEBENCH_DIR, Session, load_swebench
from ._grader import FACT_KINDS, Grade, SentRequest, grade

if TYPE_CHECKING:
    from contextfold.context import ContextConfig
    from contextfold.replay import CacheKind, RunResult

__all__ = [
    "WINDOW",
    "Replayed",
    "grade_agentscope",
    "grade_ours",
    "replay_graded",
    "run",
    "wire_text",
]

WINDOW = 16_000
LIMIT = 3000
SUMMARIZERS = ("none", "extractive", "local")
"""All of them by default; ``BENCH_RETENTION_SUMMARIZERS=none,extractive`` picks some (the
``local`` rows take over an hour on two cores)."""
LOCAL_RUNS = 6
"""Runs graded with the embedded model as summarizer (each of its summaries takes tens of
seconds on two cores)."""

_EMPTY = {
    "task_overview": "",
    "current_state": "",
    "important_discoveries": "",
    "next_steps": "",
    "context_to_preserve": "",
}


def _text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(
            _text(v.get("text", "")) if isinstance(v, dict) else _text(v) for v in value
        )
    return ""


def wire_text(message: dict[str, Any]) -> str:
    """A wire message's text, tool-call arguments decoded (a command is a fact, not JSON)."""
    parts = [_text(message.get("content"))]
    for call in message.get("tool_calls") or []:
        arguments = call.get("function", {}).get("arguments", "")
        try:
            decoded = json.loads(arguments)
        except ValueError:
            decoded = arguments
        values = decoded.values() if isinstance(decoded, dict) else [decoded]
        parts.extend(str(v) for v in values)
    return "\n".join(parts)


def sent_from_dump(path: Path) -> list[SentRequest]:
    """Our reasoning requests, from a ``--dump-requests`` file (OpenAI form)."""
    requests: list[SentRequest] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        item = json.loads(line)
        if item["kind"] != "reasoning":
            continue
        messages = item["messages"]
        s0, s1 = item["layers"]["summary"]
        summary = "\n".join(wire_text(m) for m in messages[s0:s1])
        rest = [m for i, m in enumerate(messages) if not s0 <= i < s1]
        context = messages[item["layers"]["context"][0] :]
        requests.append(
            SentRequest(
                step=item["step"],
                summary=summary,
                rest="\n".join(wire_text(m) for m in rest),
                kept_steps=sum(m["role"] == "assistant" for m in context),
                summary_tokens=o200k_count(summary) if summary else 0,
            )
        )
    return requests


@dataclass
class Replayed:
    """One replay of a run through contextfold's engine, graded from its dumped requests."""

    result: RunResult
    """The replay (with ``cost`` when priced)."""
    grade: Grade
    sizes: list[int]
    """Our token count of every call the replay sent (reasoning and summary), in order."""


async def replay_graded(
    session: Session,
    summarizer: Any,
    *,
    window: int = WINDOW,
    config: ContextConfig | None = None,
    cache: CacheKind | None = None,
) -> Replayed:
    """Replay one run through contextfold's engine (``config``: ``tool_result_limit=3000``
    by default; priced under ``cache`` if given), dump its requests, grade them."""
    from contextfold.context import ContextConfig
    from contextfold.replay import RequestDump, load_trajectory, replay_run

    run = load_trajectory(SWEBENCH_DIR / f"{session.name}.traj.json")
    with tempfile.TemporaryDirectory(prefix="bench-ret-") as tmp:
        dump = RequestDump(tmp)
        result = await replay_run(
            run,
            context_size=window,
            config=config or ContextConfig(tool_result_limit=LIMIT),
            summarizer=summarizer,
            dump=dump,
            cache=cache,
        )
        if result.error is not None:
            raise RuntimeError(f"replay of {session.name} failed: {result.error}")
        path = dump.path(run.instance_id)
        sizes = [json.loads(line)["tokens"] for line in path.read_text("utf-8").splitlines()]
        return Replayed(result, grade(session, sent_from_dump(path), window=window), sizes)


async def grade_ours(session: Session, summarizer_name: str, summarizer: Any) -> Grade:
    """Replay one run through contextfold's engine, dump its requests, grade them."""
    return (await replay_graded(session, summarizer)).grade


def _agentscope_sent(sent: list[tuple[str, str, int]]) -> list[SentRequest]:
    return [
        SentRequest(
            step=step,
            summary=summary,
            rest=rest,
            kept_steps=calls,
            summary_tokens=o200k_count(summary) if summary else 0,
        )
        for step, (summary, rest, calls) in enumerate(sent)
    ]


async def grade_agentscope(session: Session, summarize: Any) -> Grade:
    """Replay one run through AgentScope's real agent with the given summarizer, grade it."""
    from . import _agentscope

    result = await _agentscope.run_session(
        session, context_size=WINDOW, record=True, tool_result_limit=LIMIT, summarize=summarize
    )
    return grade(session, _agentscope_sent(result.extra["sent"]), window=WINDOW)


def _summarizers(name: str) -> tuple[Any, Callable[..., Awaitable[dict[str, str]]]]:
    """(our summarizer, the same summarizer for AgentScope's span items)."""
    from contextfold.context import (
        EmptySummarizer,
        ExtractiveSummarizer,
        ModelSummarizer,
        SummaryRequest,
        summarize_items,
    )
    from contextfold.message import Msg

    if name == "none":

        async def empty(items: list[tuple[str, str]], previous: str | None) -> dict[str, str]:
            return dict(_EMPTY)

        return EmptySummarizer(), empty
    if name == "extractive":

        async def extract(items: list[tuple[str, str]], previous: str | None) -> dict[str, str]:
            head = [("user", previous)] if previous else []
            return summarize_items(head + items)

        return ExtractiveSummarizer(), extract
    from contextfold.context import ContextConfig
    from contextfold.model import LocalChatModel

    model = ModelSummarizer(LocalChatModel())

    async def local(items: list[tuple[str, str]], previous: str | None) -> dict[str, str]:
        role = {"tool": "user", "system": "user"}
        request = SummaryRequest(
            messages=[Msg(r, t, role.get(r, r)) for r, t in items if t],  # type: ignore[arg-type]
            previous=Msg("summary", previous, "user") if previous else None,
            instructions=ContextConfig().compression_prompt,
            hints=(),
            schema=ContextConfig().summary_schema,
        )
        return {k: str(v) for k, v in (await model.summarize(request)).fields.items()}

    return model, local


def _pct(rate: float | None) -> str:
    return "n/a" if rate is None else f"{100 * rate:.1f}%"


def _row(system: str, summarizer: str, runs: int, g: Grade) -> str:
    cells = []
    for kind in FACT_KINDS:
        graded = g.facts[kind] - g.elsewhere[kind]
        cells.append(
            f"{_pct(g.rate(kind))} ({g.kept[kind]}/{graded}; +{g.elsewhere[kind]}; "
            f"-{g.unseen[kind]})"
        )
    share = max(g.summary_share) if g.summary_share else 0.0
    return (
        f"| {system} | {summarizer} | {runs} | {g.compressions} | "
        + " | ".join(cells)
        + f" | {100 * share:.1f}% |"
    )


async def run(opts: Options) -> str:
    sessions = load_swebench(limit=6 if opts.quick else None)
    rows: list[str] = []
    grades: dict[tuple[str, str], Grade] = {}
    chosen = os.environ.get("BENCH_RETENTION_SUMMARIZERS", ",".join(SUMMARIZERS)).split(",")
    for name in [n for n in SUMMARIZERS if n in chosen]:
        if name == "local" and opts.quick:
            continue
        ours, theirs = _summarizers(name)
        subset = sessions[:LOCAL_RUNS] if name == "local" else sessions
        ours_total, theirs_total = Grade(), Grade()
        for session in subset:
            theirs_total.add(await grade_agentscope(session, theirs))
            ours_total.add(await grade_ours(session, name, ours))
        grades[("AgentScope", name)] = theirs_total
        grades[("contextfold", name)] = ours_total
        rows.append(_row("AgentScope 2.0.11", name, len(subset), theirs_total))
        rows.append(_row("contextfold", name, len(subset), ours_total))
    none = grades.get(("contextfold", "none"))
    verdict = ""
    if none is not None:
        targets = {"paths": 0.95, "commands": 0.95, "errors": 0.90}
        parts = []
        for kind, target in targets.items():
            rate = none.rate(kind)
            ok = rate is not None and rate >= target
            parts.append(f"{kind} {_pct(rate)} (target {target:.0%}: {'met' if ok else 'MISSED'})")
        verdict = "Targets with the `none` summarizer: " + "; ".join(parts) + ".\n"
    return (
        "## Figure 4: retention in the request as sent\n\n"
        f"{len(sessions)} recorded SWE-bench runs at context_size={WINDOW}, "
        f"tool_result_limit={LIMIT}; `local` on the first {LOCAL_RUNS}. Each cell: kept in the "
        "summary of the next request / facts of the compressed spans not otherwise in that "
        "request (+ facts found in its system prompt or kept messages; - facts cut away by "
        "truncation before the compression, so not in the request before it: neither "
        "counted). Max "
        "summary share: the largest summary layer over the window, after any compression.\n\n"
        "| system | summarizer | runs | compressions | paths | commands | error lines | "
        "max summary share |\n|---|---|---:|---:|---:|---:|---:|---:|\n"
        + "\n".join(rows)
        + "\n\n"
        + verdict
    )
