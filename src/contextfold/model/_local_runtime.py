"""The embedded model's llama.cpp runtime: cyllama's prebuilt wheel, driven like
llama-cpp-python's ``Llama.create_completion`` so the library's behaviour does not depend
on which binding decodes.

What is kept from llama-cpp-python 0.3 (the binding this replaced, see BENCHMARKS.md,
"Local runtime"): one context, one sequence; a request keeps the longest token prefix the
KV cache holds and decodes the rest in batches of 512 (at least the last prompt token, for
its logits); the sampler chain of ``create_completion`` (repeat penalty over the last 64
sampled tokens, the grammar, then greedy at temperature 0, else top-k 40, typical 1.0,
top-p 0.95, min-p 0.05, temperature and a seeded draw); generation ends at an
end-of-generation token (not counted), a stop string (cut off) or ``max_tokens``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._exceptions import MissingDependencyError, ModelError

__all__ = [
    "Generation",
    "LlamaRuntime",
    "PerfCounters",
    "cyllama",
    "default_threads",
    "usable_cores",
]

_BATCH = 512
_PENALTY_LAST_N = 64
_INCOMPLETE = "\ufffd"
"""What the detokenizer shows for the bytes of a character not complete yet."""


def cyllama() -> Any:
    """cyllama's llama.cpp module, llama.cpp's own logging silenced."""
    try:
        import cyllama.llama.llama_cpp as cy
    except ImportError as exc:
        raise MissingDependencyError("cyllama", "local") from exc
    cy.disable_logging()
    return cy


@dataclass(frozen=True)
class PerfCounters:
    """llama.cpp's context counters: tokens decoded (every batch) and prompt time."""

    decoded: int
    prompt_ms: float


@dataclass
class Generation:
    """One completion: the text, the tokens sampled for it and why it ended."""

    text: str
    completion_tokens: int
    finish_reason: str


def usable_cores() -> int:
    """The CPUs this process may run on (``taskset``, a container's cpuset), not the
    machine's: llama.cpp's threads meet at a barrier after every layer, so one thread more
    than the CPUs it may use makes every layer wait for a descheduled thread."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def default_threads(n_threads: int | None) -> tuple[int, int]:
    """Threads for generating and for reading a prompt: ``n_threads`` for both if given,
    else half the usable cores for generation (memory-bound) and all of them for prompts."""
    if n_threads:
        return n_threads, n_threads
    cores = usable_cores()
    return max(cores // 2, 1), cores


class LlamaRuntime:
    """A GGUF model and one context on it; not thread safe (the caller holds a lock)."""

    def __init__(self, path: Path, *, n_ctx: int, n_threads: int | None) -> None:
        cy = cyllama()
        self._cy = cy
        try:
            self._model = cy.LlamaModel(str(path), cy.LlamaModelParams())
        except (ValueError, RuntimeError) as exc:
            raise ModelError(f"could not load {path}: {exc}") from exc
        self._vocab = self._model.get_vocab()
        params = cy.LlamaContextParams()
        params.n_ctx = n_ctx
        params.n_batch = min(n_ctx, _BATCH)
        params.n_ubatch = min(n_ctx, _BATCH)
        params.n_threads, params.n_threads_batch = default_threads(n_threads)
        params.no_perf = False  # cyllama's default: the KV-cache meter reads these timings
        self._ctx = cy.LlamaContext(self._model, params)
        self.n_ctx = n_ctx
        self.held: list[int] = []
        """The tokens the KV cache holds, in order."""

    @property
    def depth_cost(self) -> float:
        """How much a token's compute grows per token before it in the context, as a share
        of the weights' own: attention multiplies a query and a value by each earlier
        position in every layer (``4 n_layer n_embd`` per position) against ``2 n_params``
        for the weights. SmolLM2-135M: 2.6e-4, so a token at position 4,000 costs about
        twice one at the start (see ``ModelSpeed``)."""
        params = int(self._model.n_params)
        return 2 * int(self._model.n_layer) * int(self._model.n_embd) / params if params else 0.0

    def close(self) -> None:
        self._ctx.close()
        self._model.close()

    def tokenize(self, text: str, *, add_bos: bool) -> list[int]:
        return list(self._vocab.tokenize(text, add_special=add_bos, parse_special=True))

    def perf(self) -> PerfCounters:
        self._ctx.synchronize()  # llama.cpp adds a decode to its counters once it is done
        data = self._ctx.get_perf_data()
        return PerfCounters(
            decoded=int(data["n_p_eval"]) + int(data["n_eval"]),
            prompt_ms=float(data["t_p_eval_ms"]),
        )

    def generate(
        self,
        tokens: Sequence[int],
        *,
        grammar: str | None,
        max_tokens: int,
        temperature: float,
        seed: int | None,
        stop: Sequence[str],
        on_text: Callable[[str], None] | None,
    ) -> Generation:
        """``tokens`` (the prompt) completed; ``on_text`` given each piece once it is whole
        (no half character, no possible start of a stop string)."""
        sampler = self._sampler(grammar, temperature, seed)
        self._keep_prefix(tokens)
        self._decode(list(tokens[len(self.held) :]))
        sampled: list[int] = []
        shown = 0
        text = ""
        finish = "length"
        while len(sampled) < max_tokens and len(self.held) < self.n_ctx:
            token = int(sampler.sample(self._ctx, -1))
            if self._vocab.is_eog(token):
                finish = "stop"
                break
            sampled.append(token)
            text = self._vocab.detokenize(sampled, text_len_max=1024)
            cut = _first_stop(text, stop)
            if cut is not None:
                text, finish = text[:cut], "stop"
                break
            if on_text is not None:
                ready = _ready(text, stop)
                if ready > shown:
                    on_text(text[shown:ready])
                    shown = ready
            if len(sampled) < max_tokens:
                self._decode([token])
        if on_text is not None and len(text) > shown:
            on_text(text[shown:])
        return Generation(text=text, completion_tokens=len(sampled), finish_reason=finish)

    def _sampler(self, grammar: str | None, temperature: float, seed: int | None) -> Any:
        cy = self._cy
        sampler = cy.LlamaSampler(cy.LlamaSamplerChainParams())
        sampler.add_penalties(_PENALTY_LAST_N, 1.1, 0.0, 0.0)
        if grammar is not None:
            sampler.add_grammar(self._vocab, grammar, "root")
        if temperature == 0.0:
            sampler.add_greedy()
        else:
            sampler.add_top_k(40)
            sampler.add_typical(1.0, 1)
            sampler.add_top_p(0.95, 1)
            sampler.add_min_p(0.05, 1)
            sampler.add_temp(temperature)
            sampler.add_dist(0xFFFFFFFF if seed is None else seed)
        return sampler

    def _keep_prefix(self, tokens: Sequence[int]) -> None:
        """Drop from the KV cache what follows the prefix it shares with ``tokens``, and
        always the last prompt token (its logits are needed)."""
        shared = 0
        for held, wanted in zip(self.held, tokens, strict=False):
            if held != wanted:
                break
            shared += 1
        shared = max(min(shared, len(tokens) - 1), 0)
        if shared < len(self.held):
            self._ctx.memory_seq_rm(-1, shared, -1)
            del self.held[shared:]

    def _decode(self, tokens: list[int]) -> None:
        for start in range(0, len(tokens), _BATCH):
            part = tokens[start : start + _BATCH]
            try:
                self._ctx.decode(self._cy.llama_batch_get_one(part, len(self.held)))
            except ValueError as exc:
                raise ModelError(f"llama.cpp could not decode: {exc}") from exc
            self.held.extend(part)


def _first_stop(text: str, stop: Sequence[str]) -> int | None:
    found = [text.index(s) for s in stop if s in text]
    return min(found) if found else None


def _ready(text: str, stop: Sequence[str]) -> int:
    """How much of ``text`` can be shown: not a trailing half character, nor a tail that
    could begin a stop string."""
    end = len(text.rstrip(_INCOMPLETE))
    for s in stop:
        for n in range(min(len(s) - 1, end), 0, -1):
            if text[:end].endswith(s[:n]):
                end -= n
                break
    return end
