"""Building each step's request in the providers' wire forms, as the model adapters do.

Run: ``python benchmarks/bench_wire.py`` (from the repo root; ``PYTHONPATH=<tree>/src``
picks the tree, for an A/B of two commits run alternately in one session). Prints one
line per wire form.

An agent resends its whole history every step, so the adapters convert every message of
it on every request. Here each of the 44 recorded SWE-bench runs is walked step by step:
before each recorded assistant turn, the request of the history so far (the same ``Msg``
objects from step to step, as in an agent's context) is built with
``openai_request(history, tools)`` and ``anthropic_request(history, tools, cache=True)``.
Reported: the median time per request over all steps of all runs, the median history
length, and the time per message of history (median of each request's time / length).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "data" / "trajectories" / "swebench-verified-gemini3pro"


def main() -> None:
    from contextfold.message import ToolSpec, anthropic_request, openai_request
    from contextfold.replay import load_trajectory

    tools = [
        ToolSpec(
            name="bash",
            description="Run a shell command.",
            parameters={"type": "object", "properties": {"command": {"type": "string"}}},
        )
    ]
    runs = [load_trajectory(path) for path in sorted(RUNS.glob("*.traj.json"))]
    forms = {
        "openai": lambda history: openai_request(history, tools),
        "anthropic": lambda history: anthropic_request(history, tools, cache=True),
    }
    for name, build in forms.items():
        times: list[float] = []
        per_message: list[float] = []
        lengths: list[int] = []
        for run in runs:
            msgs = [m.model_copy(update={"name": m.name}) for m in run.messages]  # unconverted
            for k, msg in enumerate(msgs):
                if msg.role != "assistant" or k == 0:
                    continue
                history = msgs[:k]
                started = time.perf_counter()
                build(history)
                elapsed = time.perf_counter() - started
                times.append(elapsed)
                per_message.append(elapsed / len(history))
                lengths.append(len(history))
        print(
            f"{name}: {len(times)} requests, median history {statistics.median(lengths):.0f} "
            f"messages: median {statistics.median(times) * 1e3:.3f} ms per request, "
            f"{statistics.median(per_message) * 1e6:.2f} us per message",
            flush=True,
        )


if __name__ == "__main__":
    main()
