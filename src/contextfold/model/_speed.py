"""How fast a model reads a prompt and writes an answer, measured on this machine."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ModelSpeed"]


@dataclass(frozen=True)
class ModelSpeed:
    """A model's measured throughput (``LocalChatModel.measure_speed``): what a caller
    needs to time a call before making one, e.g. the background compaction's first
    summary, whose latency no earlier summary tells (see ``SummaryLatencyModel``)."""

    prompt_tokens_per_s: float
    """Prompt tokens read (evaluated, none served from a cache) per second."""
    output_tokens_per_s: float
    """Tokens written per second."""

    def __post_init__(self) -> None:
        if not (self.prompt_tokens_per_s > 0 and self.output_tokens_per_s > 0):
            raise ValueError(f"a speed must be positive, got {self}")

    def seconds(self, prompt_tokens: int, output_tokens: int) -> float:
        """Seconds to read ``prompt_tokens`` (none cached) and write ``output_tokens``."""
        return (
            max(0, prompt_tokens) / self.prompt_tokens_per_s
            + max(0, output_tokens) / self.output_tokens_per_s
        )
