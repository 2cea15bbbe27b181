"""Figure 1 (engine overhead per reasoning step) and figure 6 (peak memory).

Recorded runs are replayed in this process, AgentScope then ours on the same session.
Synthetic sessions run each system in a fresh child process, so the child's peak RSS is
that session's memory figure and one system's garbage never slows the other.
"""

from __future__ import annotations

import cProfile
import io
import json
import pstats
import subprocess
import sys
from typing import Any

from . import _agentscope as agentscope_side
from . import _contextfold as contextfold_side
from ._child import reasoning_steps
from ._common import Options, Pending, RunResult, fit_exponent, fmt_ms, median, ratio
from ._data import REPO_ROOT, load_swebench, synthetic_session

__all__ = ["replay_pairs", "run", "synthetic_child_process"]

from ._child import SYNTHETIC_CONTEXT


async def _ours(session: Any, **kwargs: Any) -> RunResult | str:
    """Our run, or the reason it could not run (pending / failed)."""
    try:
        return await contextfold_side.run_session(session, **kwargs)
    except Pending as exc:
        return f"pending: {exc}"
    except Exception as exc:  # report, never invent
        return f"failed: {type(exc).__name__}: {exc}"


async def replay_pairs(sessions: list[Any], context_size: int) -> list[tuple[RunResult, Any]]:
    """Both systems on each session, back to back."""
    pairs = []
    for s in sessions:
        ref = await agentscope_side.run_session(s, context_size=context_size)
        ours = await _ours(s, context_size=context_size)
        pairs.append((ref, ours))
    return pairs


def _replay_rows(pairs: list[tuple[RunResult, Any]]) -> tuple[list[str], str | None]:
    ref_steps = [t for r, _ in pairs for t in reasoning_steps(r)]
    ours_ok = [(r, o) for r, o in pairs if isinstance(o, RunResult)]
    note = next((o for _, o in pairs if isinstance(o, str)), None)
    ref_total = sum(r.total_overhead for r, _ in pairs)
    comps = sum(len(r.compressions) for r, _ in pairs)
    rows = [
        f"| AgentScope | {fmt_ms(median(ref_steps))} | {ref_total:.2f} s | {comps} |",
    ]
    if ours_ok and len(ours_ok) == len(pairs):
        our_steps = [t for _, o in ours_ok for t in reasoning_steps(o)]
        our_total = sum(o.total_overhead for _, o in ours_ok)
        run_ratios = [
            ratio(median(reasoning_steps(r)), median(reasoning_steps(o))) for r, o in ours_ok
        ]
        ocomps = sum(len(o.compressions) for _, o in ours_ok)
        rows.append(f"| contextfold | {fmt_ms(median(our_steps))} | {our_total:.2f} s | {ocomps} |")
        rows.append(
            f"| ratio (AgentScope / ours) | median per-run {median(run_ratios):.1f}x | "
            f"{ratio(ref_total, our_total):.1f}x | |"
        )
    else:
        rows.append(f"| contextfold | {note or 'pending'} | | |")
    return rows, note


def synthetic_child_process(system: str, n: int) -> dict[str, Any]:
    """Run :func:`synthetic_child` in a fresh interpreter; its JSON result."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks._child", "--system", system, "--messages", str(n)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        return {"failed": proc.stderr.strip().splitlines()[-1] if proc.stderr else "no output"}
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))


def _at(history: list[int], steps: list[float], lo: int, hi: int) -> float:
    return median([t for h, t in zip(history, steps, strict=True) if lo <= h <= hi])


def _synthetic_rows(n: int, res: dict[str, dict[str, Any]]) -> list[str]:
    rows = []
    for system in ("agentscope", "contextfold"):
        d = res[system]
        label = "AgentScope" if system == "agentscope" else "contextfold"
        if "steps" not in d:
            rows.append(f"| {n:,} | {label} | {d.get('pending') or d.get('failed')} | | | | | |")
            continue
        hist, steps = d["history"], d["steps"]
        early = _at(hist, steps, 80, 120)
        late = median(steps[-100:])
        rows.append(
            f"| {n:,} | {label} | {d['total']:.2f} s | {d['model'] + d['tool']:.2f} s | "
            f"{fmt_ms(early)} | {fmt_ms(late)} ({ratio(late, early):.1f}x) | "
            f"{fit_exponent(hist, steps):.2f} | "
            f"{d['rss_peak_kib'] / 1024:.0f} MiB "
            f"(+{(d['rss_peak_kib'] - d['rss_before_kib']) / 1024:.0f}) |"
        )
    a, c = res["agentscope"], res["contextfold"]
    if "total" in a and "total" in c:
        rows.append(
            f"| {n:,} | ratio | {ratio(a['total'], c['total']):.1f}x | | | "
            f"{ratio(median(a['steps'][-100:]), median(c['steps'][-100:])):.1f}x | | "
            f"{ratio(a['rss_peak_kib'], c['rss_peak_kib']):.2f}x |"
        )
    return rows


async def _profile_agentscope(n: int) -> str:
    """Where AgentScope's per-step time goes: top functions by own time."""
    session = synthetic_session(n)
    prof = cProfile.Profile()
    prof.enable()
    await agentscope_side.run_session(session, context_size=SYNTHETIC_CONTEXT)
    prof.disable()
    buf = io.StringIO()
    stats = pstats.Stats(prof, stream=buf)
    rows = []
    total = sum(v[2] for v in stats.stats.values())  # type: ignore[attr-defined]
    top = sorted(stats.stats.items(), key=lambda kv: kv[1][2], reverse=True)[:12]  # type: ignore[attr-defined]
    for (file, line, func), (_cc, calls, tt, _ct, _) in top:
        where = file.split("site-packages/")[-1]
        rows.append(
            f"| `{func}` ({where}:{line}) | {calls:,} | {tt:.2f} s | {100 * tt / total:.0f}% |"
        )
    return (
        f"Where AgentScope spends it (cProfile, synthetic {n:,}-message session, own time; "
        "profiling inflates absolute times):\n\n"
        "| function | calls | own time | share |\n|---|---:|---:|---:|\n" + "\n".join(rows) + "\n"
    )


async def run(opts: Options) -> str:
    sessions = load_swebench(limit=6 if opts.quick else None)
    out = [
        "## Figure 1: engine overhead per reasoning step\n",
        "Time inside the framework per reasoning step, excluding the scripted model and the "
        "tool (both timed and subtracted). Both systems replay the same recorded turns with "
        "the same summarizer, `tool_result_limit=3000`, a local workspace as offloader.\n",
    ]
    pending_note = None
    # Warm-up (not counted): first-use costs of both systems, e.g. loading tokenizers. The
    # session with the longest tool output, so that truncation and compression are both
    # exercised here.
    warm = max(sessions, key=lambda s: max((len(st.output) for st in s.steps), default=0))
    await replay_pairs([warm], 16000)
    for cs in (16000, 32000):
        pairs = await replay_pairs(sessions, cs)
        if cs == 16000:
            opts.shared["replays16000"] = pairs
        rows, note = _replay_rows(pairs)
        pending_note = pending_note or note
        out.append(
            f"\n**{len(sessions)} recorded SWE-bench runs, context_size={cs}** "
            f"({sum(len(s.steps) for s in sessions)} steps)\n\n"
            "| system | median per-step overhead | total overhead | compressions |\n"
            "|---|---:|---:|---:|\n" + "\n".join(rows) + "\n"
        )
    sizes = (1000, 2000) if opts.quick else (1000, 10000)
    out.append(
        "\n**Synthetic sessions** (no compression: context_size=1,000,000; each system in "
        "its own process; memory: that process's peak RSS while replaying, sampled every "
        "5 ms, and its growth over the RSS before the replay; see figure 6)\n\n"
        "| messages | system | total overhead | model+tool time | per step at ~100 msgs | "
        "per step, last 100 steps (growth) | fitted exponent | peak RSS (+growth) |\n"
        "|---:|---|---:|---:|---:|---:|---:|---:|\n"
    )
    synth: dict[int, dict[str, dict[str, Any]]] = {}
    table: list[str] = []
    for n in sizes:
        synth[n] = {
            sys_: synthetic_child_process(sys_, n) for sys_ in ("agentscope", "contextfold")
        }
        table += _synthetic_rows(n, synth[n])
    out[-1] += "\n".join(table) + "\n"
    opts.shared["synthetic"] = synth
    a_small, a_big = synth[sizes[0]]["agentscope"], synth[sizes[1]]["agentscope"]
    if "total" in a_small and "total" in a_big:
        out.append(
            f"\nAgentScope: {sizes[1] // sizes[0]}x the messages cost "
            f"{ratio(a_big['total'], a_small['total']):.1f}x the framework time.\n"
        )
    c_big = synth[sizes[1]]["contextfold"]
    if "total" in c_big and "total" in a_big:
        speedup = ratio(a_big["total"], c_big["total"])
        hist, steps = c_big["history"], c_big["steps"]
        flat = ratio(median(steps[-100:]), _at(hist, steps, 80, 120))
        out.append(
            f"\nTargets: {sizes[1]:,}-message session >= 100x faster: "
            f"{'met' if speedup >= 100 else 'MISSED'} ({speedup:.0f}x); per-step time at the "
            f"end within 2x of that at ~100 messages: {'met' if flat <= 2 else 'MISSED'} "
            f"({flat:.1f}x).\n"
        )
    else:
        out.append(
            "\nTargets (100x faster, flat per-step time): pending (our side not measurable).\n"
        )
    out.append("\n" + await _profile_agentscope(1000 if opts.quick else 2000))
    return "\n".join(out)
