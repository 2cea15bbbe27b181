"""Figure 6: peak memory of a long session.

Taken from the overhead figure's synthetic runs (each system in its own child process,
RSS sampled every 5 ms during the replay); run on its own, it starts those children.
"""

from __future__ import annotations

from typing import Any

from ._common import Options, ratio
from .fig_overhead import synthetic_child_process

__all__ = ["run"]


def _mib(kib: int) -> str:
    return f"{kib / 1024:.0f} MiB"


async def run(opts: Options) -> str:
    n = 2000 if opts.quick else 10000
    synth: dict[int, dict[str, dict[str, Any]]] = opts.shared.get("synthetic", {})
    res = synth.get(n) or {s: synthetic_child_process(s, n) for s in ("agentscope", "contextfold")}
    rows = []
    for system, label in (("agentscope", "AgentScope"), ("contextfold", "contextfold")):
        d = res[system]
        if "rss_peak_kib" not in d:
            rows.append(f"| {label} | {d.get('pending') or d.get('failed')} | | |")
            continue
        rows.append(
            f"| {label} | {_mib(d['rss_peak_kib'])} | {_mib(d['rss_before_kib'])} | "
            f"{_mib(d['rss_peak_kib'] - d['rss_before_kib'])} |"
        )
    a, c = res["agentscope"], res["contextfold"]
    tail = ""
    if "rss_peak_kib" in a and "rss_peak_kib" in c:
        growth_a = a["rss_peak_kib"] - a["rss_before_kib"]
        growth_c = c["rss_peak_kib"] - c["rss_before_kib"]
        tail = (
            "\nPeak RSS ratio (AgentScope / ours): "
            f"{ratio(a['rss_peak_kib'], c['rss_peak_kib']):.2f}x;"
            f" growth during the replay: {_mib(growth_a)} vs {_mib(growth_c)}.\n"
        )
    return (
        f"## Figure 6: peak memory, {n:,}-message session\n\n"
        "Each system in a fresh process after a short warm-up; RSS sampled every 5 ms.\n\n"
        "| system | peak RSS during replay | RSS before replay | growth |\n|---|---:|---:|---:|\n"
        + "\n".join(rows)
        + "\n"
        + tail
    )
