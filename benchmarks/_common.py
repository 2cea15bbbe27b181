"""Shared measurement helpers: the framework clock, exact o200k counts, statistics."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FrameworkClock",
    "Options",
    "Pending",
    "RunResult",
    "fit_exponent",
    "fmt_ms",
    "lcp",
    "median",
    "o200k_count",
    "o200k_encode",
    "ratio",
]


@dataclass
class Options:
    """Run options shared by the figures, plus results one figure hands to another."""

    quick: bool = False
    shared: dict[str, Any] = field(default_factory=dict)


class Pending(Exception):
    """Our side of a measurement cannot run yet; the message says what is missing."""


class FrameworkClock:
    """A clock that stops while the scripted model or a tool runs.

    ``exclude()`` brackets model and tool work; ``now()`` is wall time minus all excluded
    time, so differences of ``now()`` are time spent in the framework itself.
    """

    def __init__(self) -> None:
        self.excluded = 0.0
        self.model_time = 0.0
        self.tool_time = 0.0

    def now(self) -> float:
        return time.perf_counter() - self.excluded

    def add(self, seconds: float, *, kind: str) -> None:
        self.excluded += seconds
        if kind == "model":
            self.model_time += seconds
        else:
            self.tool_time += seconds


@dataclass
class Compression:
    """One compression seen during a replay (for the retention figure)."""

    span_text: str
    summary_text: str = ""


@dataclass
class RunResult:
    """What one replay of one session on one system measured."""

    system: str
    session: str
    step_overheads: list[float] = field(default_factory=list)
    step_history: list[int] = field(default_factory=list)
    total_overhead: float = 0.0
    model_time: float = 0.0
    tool_time: float = 0.0
    wall: float = 0.0
    compressions: list[Compression] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    estimates: list[tuple[int, int]] = field(default_factory=list)
    offload_text: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


_ENC: Any = None


def _encoding() -> Any:
    # tiktoken itself (the reference implementation), with its o200k vocabulary seeded
    # offline from the bpe-openai wheel by contextfold's helper (sha256-checked by tiktoken).
    global _ENC
    if _ENC is None:
        from contextfold.token import tiktoken_encoding

        _ENC = tiktoken_encoding("o200k_base")
    return _ENC


def o200k_encode(text: str) -> list[int]:
    """Exact o200k_base token ids (tiktoken, offline)."""
    return list(_encoding().encode_ordinary(text))


def o200k_count(text: str) -> int:
    """Exact o200k_base token count (tiktoken, offline)."""
    return len(_encoding().encode_ordinary(text))


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def fmt_ms(seconds: float) -> str:
    if math.isnan(seconds):
        return "n/a"
    ms = seconds * 1000
    return f"{ms:.3f} ms" if ms < 10 else f"{ms:.1f} ms"


def fit_exponent(history: Sequence[int], times: Sequence[float], *, bins: int = 12) -> float:
    """Log-log slope of per-step time against history length.

    Steps are grouped into log-spaced bins of history length and each bin's median is
    used, so single noisy steps (GC pauses) do not drive the fit.
    """
    pts = [(h, t) for h, t in zip(history, times, strict=True) if h > 0 and t > 0]
    if len(pts) < 4:
        return float("nan")
    lo, hi = math.log(min(h for h, _ in pts)), math.log(max(h for h, _ in pts))
    if hi - lo < 1e-9:
        return float("nan")
    width = (hi - lo) / bins
    groups: dict[int, list[tuple[int, float]]] = {}
    for h, t in pts:
        groups.setdefault(min(bins - 1, int((math.log(h) - lo) / width)), []).append((h, t))
    xs = [math.log(statistics.median(h for h, _ in g)) for g in groups.values()]
    ys = [math.log(statistics.median(t for _, t in g)) for g in groups.values()]
    if len(xs) < 3:
        return float("nan")
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den


def lcp(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
