"""The embedded model's speed on this machine, measured by one short completion.

The background compaction times its first summary before any summary ran (issue 30); a
constant guess was 10 s where the embedded model took minutes. So the model is asked
once: it reads a fixed prompt of a few hundred tokens (logs, code, prose: what a
summarizer reads; what the KV cache already holds of it is not counted) and writes a
fixed number of tokens under a grammar (as a summary is written under its schema's).
The rates are this machine's at that moment: a larger prompt reads somewhat slower
(attention grows with it) and the load changes, which is why a caller keeps a margin and
prefers latencies it measured later.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ._local_completion import complete
from ._local_kvcache import KVCacheMeter
from ._speed import ModelSpeed

if TYPE_CHECKING:
    from ._local_runtime import LlamaRuntime

__all__ = ["measure_speed"]

_WRITTEN = 24
"""Tokens the measurement writes: few, but enough that one token's time is not all."""

_GRAMMAR = 'root ::= "{\\"note\\": \\"" [a-z ]{' + str(_WRITTEN) + '} "\\"}"'
"""A JSON object with one string, as a summary is written under its schema's grammar."""


def _prompt() -> str:
    lines = [
        f"log {n} line {i}: GET /api/v{i % 3}/items/{n * 37 + i} status "
        f"{200 if (n + i) % 7 else 500} in {(n * 13 + i * 7) % 900} ms"
        for n in range(2)
        for i in range(4)
    ]
    code = (
        "def retry(call, attempts=3):\n    for n in range(attempts):\n        try:\n"
        "            return call()\n        except TimeoutError as exc:\n"
        "            last = exc\n    raise last\n"
    )
    prose = (
        "The user asked to find why the service returns errors under load. The logs "
        "show timeouts in the items endpoint after the cache was disabled; the retry "
        "helper hides the first two failures. Next: read the cache settings and the "
        "deployment notes, then propose a fix and a test."
    )
    body = "\n".join(lines) + "\n\n" + code + "\n" + prose
    return (
        "<|im_start|>system\nYou summarize an agent's work.<|im_end|>\n"
        f"<|im_start|>user\n{body}\n\nWrite one short note as JSON.<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def measure_speed(llama: LlamaRuntime, *, model_name: str, context_size: int) -> ModelSpeed:
    """Time one completion of the fixed prompt (see the module) on ``llama``; the caller
    holds the model's lock. Its KV-cache counters go to a meter of its own, not the
    model's (the measurement is not a call of the caller's)."""
    meter = KVCacheMeter()
    started = time.perf_counter()
    done = complete(
        llama,
        _prompt(),
        model_name=model_name,
        context_size=context_size,
        max_tokens=_WRITTEN + 16,
        temperature=0.0,
        seed=0,
        grammar=_GRAMMAR,
        on_text=None,
        meter=meter,
    )
    total = time.perf_counter() - started
    stats = meter.snapshot()
    reading = max(stats.prompt_eval_seconds, 1e-6)
    writing = max(total - stats.prompt_eval_seconds, 1e-6)
    read, written = max(1, stats.evaluated_tokens), max(1, done.completion_tokens)
    k = llama.depth_cost
    # The rates at the start of the context (``ModelSpeed``): these tokens sat a little
    # way into it, each slower by ``k`` per token before it.
    return ModelSpeed(
        prompt_tokens_per_s=read / reading * (1 + k * (read - 1) / 2),
        output_tokens_per_s=written / writing * (1 + k * (read + (written - 1) / 2)),
        depth_cost=k,
    )
