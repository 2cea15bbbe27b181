"""Soak mode of the reliability suite: run it again and again, scaled up, for N minutes.

    python scripts/soak.py --minutes 30             # factor 5, new seed every round
    python scripts/soak.py --minutes 0 --factor 1   # one CI-sized round, with the counts

Each round runs ``pytest tests/reliability`` with ``CONTEXTFOLD_SOAK=<factor>`` (every
iteration count multiplied: crash rounds, cancellation sweeps, hypothesis examples, load
turns) and ``CONTEXTFOLD_SOAK_SEED=<round>`` (new random kill times and fault points).
It stops at the first failing round and prints the totals of what was exercised.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="how long to keep going")
    parser.add_argument("--factor", type=int, default=5, help="iteration multiplier per round")
    parser.add_argument("--seed", type=int, default=1, help="seed of the first round")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()

    report = Path(tempfile.mkstemp(prefix="contextfold-soak-", suffix=".jsonl")[1])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH")) if p)
    env["CONTEXTFOLD_SOAK"] = str(args.factor)
    env["CONTEXTFOLD_RELIABILITY_REPORT"] = str(report)
    deadline = time.monotonic() + args.minutes * 60
    rounds, status = 0, 0
    while True:
        env["CONTEXTFOLD_SOAK_SEED"] = str(args.seed + rounds)
        started = time.monotonic()
        cmd = [sys.executable, "-m", "pytest", "tests/reliability", "-q", "-s",
               "-p", "no:cacheprovider", "--timeout", "3600", *args.pytest_args]  # fmt: skip
        status = subprocess.call(cmd, cwd=ROOT, env=env)
        rounds += 1
        took = time.monotonic() - started
        print(f"soak round {rounds} (seed {args.seed + rounds - 1}): exit {status}, {took:.0f}s")
        if status != 0 or time.monotonic() + took > deadline:
            break
    totals: Counter[tuple[str, str]] = Counter()
    for line in report.read_text().splitlines():
        item = json.loads(line)
        totals[(item["area"], item["what"])] += item["count"]
    report.unlink()
    print(f"\n{rounds} round(s), factor {args.factor}; exercised:")
    by_area: Counter[str] = Counter()
    for (area, what), count in sorted(totals.items()):
        print(f"  {area:32} {count:8}  {what}")
        by_area[area] += count
    print("\nby area:")
    for area, count in sorted(by_area.items()):
        print(f"  {area:32} {count:8}")
    return status


if __name__ == "__main__":
    raise SystemExit(main())
