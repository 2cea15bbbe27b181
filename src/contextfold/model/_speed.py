"""How fast a model reads a prompt and writes an answer, measured on this machine."""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["ModelSpeed"]


@dataclass(frozen=True)
class ModelSpeed:
    """A model's measured throughput (``LocalChatModel.measure_speed``): what a caller
    needs to time a call before making one, e.g. the background compaction's first
    summary, whose latency no earlier summary tells (see ``SummaryLatencyModel``).

    A token's time grows with the tokens before it (attention reads each of them): the
    rates are those at the start of the context, and ``depth_cost`` the share one token's
    time grows by per token before it. Without it a summary of a full 8k window, timed
    on a few hundred tokens' rate, was expected in 46 s and took 100-200 s."""

    prompt_tokens_per_s: float
    """Prompt tokens read (evaluated, none served from a cache) per second, at the start."""
    output_tokens_per_s: float
    """Tokens written per second, at the start."""
    depth_cost: float = 0.0
    """A token's time grows by this share of itself per token before it in the context."""

    def __post_init__(self) -> None:
        if not (self.prompt_tokens_per_s > 0 and self.output_tokens_per_s > 0):
            raise ValueError(f"a speed must be positive, got {self}")
        if not (math.isfinite(self.depth_cost) and self.depth_cost >= 0):
            raise ValueError(f"depth_cost must be finite and non-negative, got {self}")

    def seconds(self, prompt_tokens: int, output_tokens: int) -> float:
        """Seconds to read ``prompt_tokens`` (none cached) from the start of the context and
        write ``output_tokens`` after them."""
        n, m, k = max(0, prompt_tokens), max(0, output_tokens), self.depth_cost
        reading = n / self.prompt_tokens_per_s * (1 + k * max(0, n - 1) / 2)
        writing = m / self.output_tokens_per_s * (1 + k * (n + max(0, m - 1) / 2))
        return reading + writing
