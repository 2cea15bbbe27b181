"""What a replay's requests would cost, with the provider's prompt cache modelled.

Every model call of a replay (reasoning steps and summary calls) is built in the
provider's wire form, run through the cache model of ``--cache`` (``_cache``), and priced
with ``pricing.json`` (or the user's file): uncached input, cache writes, cache reads and
output, each at its own rate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, computed_field

from ..message import Msg, ToolChoice, ToolSpec, anthropic_request, openai_request
from ..token import TokenCounter
from ._cache import CacheKind, anthropic_blocks, cache_model, llama_blocks, openai_blocks

__all__ = ["CallCost", "CostLedger", "RunCost", "load_prices"]

CallKind = Literal["reasoning", "summary"]

_STEP_SECONDS = 10.0
"""Time between two recorded steps, when a recording has no timestamps: well inside any
cache lifetime, as for an agent working without pause."""


def load_prices(path: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """The shipped prices and cache rules, updated by the user's file (same shape) if any."""
    text = resources.files(__package__).joinpath("pricing.json").read_text(encoding="utf-8")
    prices: dict[str, dict[str, Any]] = {
        k: v for k, v in json.loads(text).items() if not k.startswith("_")
    }
    if path is not None:
        override = json.loads(Path(path).read_text(encoding="utf-8"))
        if not isinstance(override, dict):
            raise ValueError(f"{path}: expected a JSON object of cache models")
        for kind, entry in override.items():
            if kind.startswith("_"):
                continue
            if not isinstance(entry, dict):
                raise ValueError(f"{path}: {kind!r} must be an object of prices and rules")
            prices.setdefault(kind, {}).update(entry)
    return prices


class CallCost(BaseModel):
    """One model call: how its input split under the cache, its output, its price."""

    kind: CallKind
    step: int
    uncached: int
    write: int
    read: int
    output: int
    dollars: float
    new_tokens: int = 0
    """Tokens, in the cache model's own block counts, of what this reasoning call sends for
    the first time: the whole request for the first call, else the messages added since
    the previous reasoning call (and a trailing usage note). What a perfect prefix cache
    would still have to read uncached; 0 for summary calls."""


class RunCost(BaseModel):
    """The cost of one replayed run, call by call."""

    cache: CacheKind
    calls: list[CallCost] = []
    rates: dict[str, float] = {}
    """$/MTok the calls were priced at: ``input``, ``cache_write``, ``cache_read``, ``output``."""

    def _sum(self, name: str) -> int:
        return sum(int(getattr(c, name)) for c in self.calls)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def uncached(self) -> int:
        """Input tokens at the full price."""
        return self._sum("uncached")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def write(self) -> int:
        """Input tokens written to the cache."""
        return self._sum("write")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def read(self) -> int:
        """Input tokens read from the cache."""
        return self._sum("read")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def output(self) -> int:
        """Output tokens."""
        return self._sum("output")

    @property
    def input(self) -> int:
        """All input tokens."""
        return self.uncached + self.write + self.read

    @computed_field  # type: ignore[prop-decorator]
    @property
    def dollars(self) -> float:
        """The whole run's price."""
        return sum(c.dollars for c in self.calls)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def summary_dollars(self) -> float:
        """The price of the summary calls alone."""
        return sum(c.dollars for c in self.calls if c.kind == "summary")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cache_read_share(self) -> float:
        """Input tokens read from the cache over all input tokens, summary calls included."""
        return self.read / self.input if self.input else 0.0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ceiling_share(self) -> float:
        """The read share of a perfect prefix cache: only each step's new messages (and
        nothing of the summary calls) uncached."""
        new = sum(c.new_tokens for c in self.calls if c.kind == "reasoning")
        return 1 - new / self.input if self.input else 0.0


class CostLedger:
    """Prices every call of one replayed run under one cache model."""

    def __init__(
        self,
        cache: CacheKind,
        prices: Mapping[str, Mapping[str, Any]],
        counter: TokenCounter,
    ) -> None:
        if cache not in prices:
            raise ValueError(f"no prices for cache model {cache!r}; have {sorted(prices)}")
        self.kind: CacheKind = cache
        self.rates = prices[cache]
        self.counter = counter
        self.model = cache_model(cache, self.rates)
        base = float(self.rates["input"])
        self.cost = RunCost(
            cache=cache,
            rates={
                "input": base,
                "cache_write": float(self.rates.get("cache_write", base)),
                "cache_read": float(self.rates.get("cache_read", base)),
                "output": float(self.rates["output"]),
            },
        )
        self._last_stored: list[str] = []

    def blocks_of(
        self, messages: Sequence[Msg], tools: Sequence[ToolSpec], tool_choice: ToolChoice | None
    ) -> list[Any]:
        """The request in the provider's wire form, cut into cache blocks."""
        if self.kind == "anthropic":
            body = anthropic_request(messages, tools, tool_choice if tools else None, cache=True)
            return anthropic_blocks(body, self.counter)
        if self.kind == "llama":
            return llama_blocks(messages, tools, tool_choice, self.counter)
        return openai_blocks(openai_request(messages, tools, tool_choice), self.counter)

    def record(
        self,
        kind: CallKind,
        step: int,
        messages: Sequence[Msg],
        tools: Sequence[ToolSpec],
        *,
        tool_choice: ToolChoice | None = None,
        output_tokens: int,
        new_messages: int | None = 0,
        at: float | None = None,
    ) -> CallCost:
        """Account one call (in call order); returns its cost.

        ``new_messages`` is how many trailing messages of ``messages`` are sent for the
        first time (``None``: the whole request is, as for a run's first call); their
        tokens are measured in the same block counts the cache model splits, so the
        perfect-prefix ceiling and the simulated reads are in one unit.
        """
        when = step * _STEP_SECONDS if at is None else at
        blocks = self.blocks_of(messages, tools, tool_choice)
        usage = self.model.request(blocks, at=when)
        new_tokens = 0
        if new_messages is None:
            new_tokens = sum(b.tokens for b in blocks)
        elif new_messages > 0:
            kept = self.blocks_of(messages[: len(messages) - new_messages], tools, tool_choice)
            new_tokens = sum(b.tokens for b in blocks) - sum(b.tokens for b in kept)
        rate = self.cost.rates
        dollars = (
            usage.uncached * rate["input"]
            + usage.write * rate["cache_write"]
            + usage.read * rate["cache_read"]
            + output_tokens * rate["output"]
        ) / 1e6
        call = CallCost(
            kind=kind,
            step=step,
            uncached=usage.uncached,
            write=usage.write,
            read=usage.read,
            output=output_tokens,
            dollars=dollars,
            new_tokens=new_tokens,
        )
        self.cost.calls.append(call)
        return call
