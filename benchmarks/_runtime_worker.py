"""One llama.cpp binding measured on jobs from ``local_runtime.py``: run as a script by the
interpreter that has the binding (``llama-cpp-python`` or ``cyllama``), stdlib only
otherwise, so each runtime is measured in its own process (load time, memory).

Both runtimes decode with llama-cpp-python's sampler chain for ``create_completion``
(penalties over the last 64 sampled tokens, the grammar, then greedy at temperature 0 or
top-k 40, typical 1.0, top-p 0.95, min-p 0.05, temperature, seeded dist), so a difference
in the text is a difference in the runtime (its llama.cpp build or its grammar converter),
not in the sampling.
"""

from __future__ import annotations

import json
import resource
import sys
import threading
import time
from typing import Any

__all__: list[str] = []


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class LlamaCppPython:
    name = "llama-cpp-python"

    def __init__(self, path: str, n_ctx: int) -> None:
        import llama_cpp
        from llama_cpp import Llama

        self.version = llama_cpp.__version__
        self.llama = Llama(path, n_ctx=n_ctx, verbose=False)
        self._llama_cpp = llama_cpp

    def tokenize(self, text: str) -> list[int]:
        return list(self.llama.tokenize(text.encode(), add_bos=True, special=True))

    def grammar(self, gbnf: str | None, schema: str | None) -> Any:
        from llama_cpp.llama_grammar import LlamaGrammar

        if schema is not None:
            return LlamaGrammar.from_json_schema(schema, verbose=False)
        if gbnf is not None:
            return LlamaGrammar.from_string(gbnf, verbose=False)
        return None

    def complete(self, prompt: str, grammar: Any, temp: float, max_tokens: int, seed: int) -> Any:
        out: Any = self.llama.create_completion(
            prompt=prompt,
            max_tokens=max_tokens,
            temperature=temp,
            repeat_penalty=1.1,
            stop=["<|im_end|>"],
            grammar=grammar,
            seed=seed,
        )
        return out["choices"][0]["text"], out["usage"]["completion_tokens"]

    def evaluated(self) -> int:
        data = self._llama_cpp.llama_perf_context(self.llama.ctx)
        return int(data.n_p_eval) + int(data.n_eval)


class Cyllama:
    """cyllama's low-level API driven like llama-cpp-python's ``generate``: the longest
    prefix held in the KV cache is kept, the rest of the prompt decoded in 512 batches."""

    name = "cyllama"

    def __init__(self, path: str, n_ctx: int) -> None:
        import cyllama
        import cyllama.llama.llama_cpp as cy

        cy.disable_logging()
        self.version = cyllama.__version__
        self.cy = cy
        self.model = cy.LlamaModel(path, cy.LlamaModelParams())
        self.vocab = self.model.get_vocab()
        params = cy.LlamaContextParams()
        params.n_ctx = n_ctx
        params.n_batch = 512
        params.n_ubatch = 512
        params.n_threads = 1
        params.n_threads_batch = 2
        self.ctx = cy.LlamaContext(self.model, params)
        self.held: list[int] = []

    def tokenize(self, text: str) -> list[int]:
        return list(self.vocab.tokenize(text, add_special=True, parse_special=True))

    def grammar(self, gbnf: str | None, schema: str | None) -> str | None:
        if schema is not None:
            return str(self.cy.json_schema_to_grammar(schema))
        return gbnf

    def _sampler(self, grammar: str | None, temp: float, seed: int) -> Any:
        cy = self.cy
        s = cy.LlamaSampler(cy.LlamaSamplerChainParams())
        s.add_penalties(64, 1.1, 0.0, 0.0)
        if grammar is not None:
            s.add_grammar(self.vocab, grammar, "root")
        if temp == 0.0:
            s.add_greedy()
        else:
            s.add_top_k(40)
            s.add_typical(1.0, 1)
            s.add_top_p(0.95, 1)
            s.add_min_p(0.05, 1)
            s.add_temp(temp)
            s.add_dist(seed)
        return s

    def _eval(self, tokens: list[int]) -> None:
        for i in range(0, len(tokens), 512):
            part = tokens[i : i + 512]
            self.ctx.decode(self.cy.llama_batch_get_one(part, len(self.held)))
            self.held.extend(part)

    def complete(self, prompt: str, grammar: Any, temp: float, max_tokens: int, seed: int) -> Any:
        tokens = self.tokenize(prompt)
        shared = 0
        for a, b in zip(self.held, tokens, strict=False):
            if a != b:
                break
            shared += 1
        if shared == len(tokens):
            shared -= 1  # re-evaluate the last prompt token for its logits
        self.ctx.memory_seq_rm(-1, shared, -1)
        del self.held[shared:]
        sampler = self._sampler(grammar, temp, seed)
        self._eval(tokens[shared:])
        out: list[int] = []
        while len(out) < max_tokens:
            token = int(sampler.sample(self.ctx, -1))
            if self.vocab.is_eog(token):
                break
            out.append(token)
            if len(out) == max_tokens:
                break
            self._eval([token])
        text = self.vocab.detokenize(out, text_len_max=1 << 16)
        return text.split("<|im_end|>")[0], len(out)

    def evaluated(self) -> int:
        data = self.ctx.get_perf_data()
        return int(data["n_p_eval"]) + int(data["n_eval"])


def main() -> None:
    runtime, job_file = sys.argv[1], sys.argv[2]
    with open(job_file) as f:
        job = json.load(f)
    rss0 = _rss_mb()
    t0 = time.perf_counter()
    rt: Any = (LlamaCppPython if runtime == "llama-cpp-python" else Cyllama)(
        job["model"], job["n_ctx"]
    )
    result: dict[str, Any] = {
        "runtime": rt.name,
        "version": rt.version,
        "load_s": time.perf_counter() - t0,
        "rss_after_load_mb": _rss_mb() - rss0,
    }
    result["tokens"] = [rt.tokenize(text) for text in job["corpus"]]
    decodes = []
    for d in job["decodes"]:
        grammar = rt.grammar(d.get("gbnf"), d.get("schema"))
        text, n = rt.complete(d["prompt"], grammar, d["temp"], d["max_tokens"], d["seed"])
        decodes.append({"text": text, "completion_tokens": n})
    result["decodes"] = decodes
    # Prefix reuse: the second prompt shares all but its last turn with the first.
    first, second = job["reuse"]
    rt.complete(first, None, 0.0, 1, 0)
    before = rt.evaluated()
    rt.complete(second, None, 0.0, 1, 0)
    result["reuse"] = {
        "prompt_tokens": len(rt.tokenize(second)),
        "evaluated": rt.evaluated() - before - 0,
    }
    # Speed: a long prompt from nothing, then generation without a grammar.
    rt.complete("x", None, 0.0, 1, 0)  # move the cache off the long prompt
    t = time.perf_counter()
    rt.complete(job["long_prompt"], None, 0.0, 1, 0)
    prompt_s = time.perf_counter() - t
    result["prompt_tok_s"] = len(rt.tokenize(job["long_prompt"])) / prompt_s
    t = time.perf_counter()
    _, n = rt.complete(job["gen_prompt"], None, 0.7, 128, 1)
    result["gen_tok_s"] = n / (time.perf_counter() - t)
    result["gen_tokens"] = n
    if runtime == "cyllama":
        result["threads"] = _threads(rt, job)
    result["peak_rss_mb"] = _peak_mb()
    print(json.dumps(result))


def _threads(rt: Any, job: dict[str, Any]) -> dict[str, Any]:
    """Two contexts on one model decoding at once in two threads: same text as alone?"""
    cy = rt.cy
    second = Cyllama.__new__(Cyllama)
    second.cy, second.model, second.vocab, second.held = cy, rt.model, rt.vocab, []
    params = cy.LlamaContextParams()
    params.n_ctx = job["n_ctx"]
    params.n_threads, params.n_threads_batch = 1, 1
    second.ctx = cy.LlamaContext(rt.model, params)
    prompt = job["gen_prompt"]
    results: list[str] = []

    def fresh(r: Any) -> str:
        r.held.clear()
        r.ctx.memory_seq_rm(-1, 0, -1)
        return str(r.complete(prompt, None, 0.0, 48, 0)[0])

    alone = fresh(rt)

    def run(r: Any) -> None:
        for _ in range(3):
            results.append(fresh(r))

    t = time.perf_counter()
    workers = [threading.Thread(target=run, args=(r,)) for r in (rt, second)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return {
        "runs": len(results),
        "same_as_alone": sum(r == alone for r in results),
        "seconds": time.perf_counter() - t,
    }


if __name__ == "__main__":
    main()
