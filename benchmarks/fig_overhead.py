"""Figure 1 (engine overhead per reasoning step) and figure 6 (peak memory).

Each system runs in a fresh child process of its own (``benchmarks._child``): the recorded
runs, replayed at each window after a whole warm-up pass, and each synthetic session, whose
child's peak RSS is that session's memory figure. One system's imports and garbage never
slow the other: replayed in one process, AgentScope then ours on each session, our median
step at 16k was 0.151-0.156 ms after an AgentScope pass and 0.120 ms in a process of its
own, in one session.
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
from ._common import Options, fit_exponent, fmt_ms, median, ratio
from ._data import REPO_ROOT, load_swebench, synthetic_session

__all__ = ["replay_child_process", "run", "synthetic_child_process"]

from ._child import SYNTHETIC_CONTEXT


def replay_child_process(system: str, windows: tuple[int, ...], limit: int | None) -> Any:
    """Run :func:`replay_child` in a fresh interpreter; per window, its runs (JSON)."""
    command = [sys.executable, "-m", "benchmarks._child", "--system", system]
    command += ["--replay", ",".join(str(w) for w in windows)]
    if limit is not None:
        command += ["--limit", str(limit)]
    proc = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        last = proc.stderr.strip().splitlines()[-1] if proc.stderr else "no output"
        raise RuntimeError(f"the {system} replay child failed: {last}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _replay_rows(
    ref: list[dict[str, Any]], ours: list[dict[str, Any]]
) -> tuple[list[str], str | None]:
    """The table rows of one window from both systems' runs (same sessions, same order)."""
    note = next((r["note"] for r in [*ref, *ours] if "note" in r), None)
    if any("note" in r for r in ref):
        return [f"| AgentScope | {note} | | |"], note
    ref_steps = [t for r in ref for t in r["steps"]]
    ref_total = sum(r["total"] for r in ref)
    comps = sum(r["compressions"] for r in ref)
    rows = [f"| AgentScope | {fmt_ms(median(ref_steps))} | {ref_total:.2f} s | {comps} |"]
    if all("steps" in o for o in ours) and len(ours) == len(ref):
        our_steps = [t for o in ours for t in o["steps"]]
        our_total = sum(o["total"] for o in ours)
        run_ratios = [
            ratio(median(r["steps"]), median(o["steps"])) for r, o in zip(ref, ours, strict=True)
        ]
        ocomps = sum(o["compressions"] for o in ours)
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
    windows = (16000, 32000)
    limit = 6 if opts.quick else None
    ref = replay_child_process("agentscope", windows, limit)
    ours = replay_child_process("contextfold", windows, limit)
    for cs in windows:
        rows, note = _replay_rows(ref[str(cs)], ours[str(cs)])
        pending_note = pending_note or note
        out.append(
            f"\n**{len(sessions)} recorded SWE-bench runs, context_size={cs}** "
            f"({sum(len(s.steps) for s in sessions)} steps; each system in its own process, "
            "after a warm-up pass over every run)\n\n"
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
