"""Entry point: ``python -m benchmarks all [--quick] [--out FILE]``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import sys
import time
from pathlib import Path

from . import (
    fig_accuracy,
    fig_cache_validation,
    fig_cost,
    fig_memory,
    fig_offload,
    fig_options,
    fig_overhead,
    fig_retention,
    fig_search,
)
from ._common import Options

FIGURES = {
    "overhead": fig_overhead,  # figure 1
    "accuracy": fig_accuracy,  # figure 2
    "offload": fig_offload,  # figure 3
    "retention": fig_retention,  # figure 4
    "cost": fig_cost,  # figure 5
    "memory": fig_memory,  # figure 6 (reuses the overhead figure's synthetic runs)
    "search": fig_search,  # ranked search (issue 14)
    "cache": fig_cache_validation,  # the prompt-cache simulator against real counters
    "options": fig_options,  # cache-preserving compaction options (issue 13 §2)
}
ON_REQUEST = {"cache"}
"""Figures ``all`` leaves out (the cache validation evaluates ~28k prompt tokens with
llama.cpp: 20 minutes or more on 2 cores); run them by name."""


def machine() -> str:
    """nproc, CPU model and memory of this machine, for the report."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = "unknown"
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    except OSError:
        pass
    import agentscope

    return (
        f"- CPU: {cpu}, {os.cpu_count()} logical CPUs (nproc)\n"
        f"- Memory: {mem}\n"
        f"- Python {platform.python_version()} on {platform.system()} {platform.release()}\n"
        f"- AgentScope {agentscope.__version__}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("figure", choices=["all", *FIGURES])
    parser.add_argument("--quick", action="store_true", help="smaller inputs (about 3 minutes)")
    parser.add_argument("--out", default="benchmarks/results.md", help="markdown report path")
    args = parser.parse_args(argv)
    logging.getLogger("as").setLevel(logging.WARNING)
    logging.getLogger("contextfold").setLevel(logging.WARNING)

    opts = Options(quick=args.quick)
    names = [n for n in FIGURES if n not in ON_REQUEST] if args.figure == "all" else [args.figure]
    sections: list[str] = []
    started = time.perf_counter()
    for name in names:
        t0 = time.perf_counter()
        print(f"== {name} ...", file=sys.stderr, flush=True)
        section = asyncio.run(FIGURES[name].run(opts))
        print(section, flush=True)
        sections.append(section)
        print(f"== {name} took {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    cmd = "python -m benchmarks " + " ".join(argv if argv is not None else sys.argv[1:])
    header = (
        "# Benchmark results\n\n"
        f"Command: `{cmd}` (run time {time.perf_counter() - started:.0f} s)\n\n"
        f"{machine()}\n"
    )
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(header + "\n" + "\n".join(sections), encoding="utf-8")
    print(f"report written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
