"""``--dump-requests``: every request of a replay, as the model adapters would send it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from contextfold.cli import app
from contextfold.context import ContextConfig, ContextEngine, ModelSummarizer
from contextfold.replay import RequestDump, load_trajectory, replay_run, tools_of

pytest.importorskip("openai", reason="needs contextfold[openai]")
pytest.importorskip("anthropic", reason="needs contextfold[anthropic]")

from tests.model.model_fakes import FakeServer


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def test_the_cli_writes_one_file_per_run_with_every_call_in_order(
    swe_files: list[Path], tmp_path: Path
) -> None:
    out = tmp_path / "dump"
    result = CliRunner().invoke(
        app, ["replay", str(swe_files[0]), "-c", "8000", "-q", "--dump-requests", str(out)]
    )
    assert result.exit_code == 0, result.output
    run = load_trajectory(swe_files[0])
    (path,) = out.iterdir()
    assert path.name == f"{run.instance_id}.jsonl"
    dumped = lines(path)
    reasoning = [d for d in dumped if d["kind"] == "reasoning"]
    summaries = [d for d in dumped if d["kind"] == "summary"]
    assert len(reasoning) == sum(m.role == "assistant" for m in run.messages)
    assert [d["step"] for d in reasoning] == list(range(len(reasoning)))
    assert summaries, "an 8k window compresses this run"
    for summary in summaries:
        # A summary call comes right before the reasoning call of the step it precedes.
        after = dumped[dumped.index(summary) + 1]
        assert after["step"] == summary["step"]
        assert set(summary["output"]) >= {"task_overview", "next_steps"}
    assert all(d["run"] == run.instance_id for d in dumped)
    assert all(d["tokens"] <= 8000 for d in reasoning)
    assert reasoning[0]["messages"][0] == {"role": "system", "content": run.system}
    assert reasoning[0]["layers"] == {
        "system": [0, 1],
        "summary": [1, 1],
        "context": [1, len(reasoning[0]["messages"])],
    }
    after_summary = dumped[dumped.index(summaries[0]) + 1]
    (first, end) = after_summary["layers"]["summary"]
    assert end == first + 1
    assert "saved in" in after_summary["messages"][first]["content"]


def test_an_unknown_dump_format_is_a_usage_error(swe_files: list[Path], tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        ["replay", str(swe_files[0]), "--dump-requests", str(tmp_path), "--dump-format", "x"],
    )
    assert result.exit_code == 2
    assert "unknown format 'x'" in " ".join(result.output.split())


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_dumped_requests_are_what_the_adapters_send(
    swe_files: list[Path], tmp_path: Path, provider: str
) -> None:
    """Each dumped reasoning request, sent through the real SDK adapter, arrives as dumped;
    summary calls made through an adapter are dumped as the server received them."""
    fake = FakeServer(provider)  # type: ignore[arg-type]
    model = fake.model(context_size=100_000)
    run = load_trajectory(swe_files[0])
    dump = RequestDump(tmp_path / provider, format=provider)  # type: ignore[arg-type]
    engine = ContextEngine(counter=model.token_counter, context_size=8000)
    tools = tools_of(run)
    with dump.run(run.instance_id) as writer:
        for msg in run.messages[:30]:
            if msg.role == "assistant":
                sent = await engine.prepare(run.system or "", tools)
                writer.write("reasoning", sent.messages(), sent.tools, tokens=sent.usage.total)
                await model.generate(sent.messages(), tools=sent.tools)
            if msg.tool_results:
                await engine.add_tool_results(msg)
            else:
                engine.append(msg)
    dumped = lines(dump.path(run.instance_id))
    assert len(dumped) == len(fake.requests) > 5
    keys = ("messages", "tools", "tool_choice", "system")
    for line, body in zip(dumped, fake.requests, strict=True):
        assert canonical({k: line.get(k) for k in keys}) == canonical(
            {k: body.get(k) for k in keys}
        )

    fake.requests.clear()
    summarizer = ModelSummarizer(fake.model(context_size=100_000))
    await replay_run(
        run,
        context_size=8000,
        summarizer=summarizer,
        config=ContextConfig(),
        dump=RequestDump(tmp_path / f"{provider}-replay", format=provider),  # type: ignore[arg-type]
    )
    replayed = lines(tmp_path / f"{provider}-replay" / f"{run.instance_id}.jsonl")
    summaries = [d for d in replayed if d["kind"] == "summary"]
    assert summaries
    assert len(summaries) == len(fake.requests)
    for line, body in zip(summaries, fake.requests, strict=True):
        assert canonical({k: line.get(k) for k in keys}) == canonical(
            {k: body.get(k) for k in keys}
        )
        assert line["output"] == {name: f"{name} (wire)" for name in line["output"]}
