"""The "engine in your own loop" example (docs/how-to/own-loop.md, linked from the README)
runs as written, with a scripted model."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from contextfold.message import ToolCallBlock, ToolSpec
from contextfold.model import ScriptedModel, ScriptedReply, ScriptedRequest, tool_reply

PAGE = Path(__file__).resolve().parents[2] / "docs" / "how-to" / "own-loop.md"
SUMMARY = {
    "task_overview": "Count the lines of the logs.",
    "current_state": "Read log 0 to log 5.",
    "important_discoveries": "Each log has 400 lines.",
    "next_steps": "Answer.",
    "context_to_preserve": "none",
}


def engine_example() -> str:
    match = re.search(r"```python\n(.*?)```", PAGE.read_text(), re.DOTALL)
    assert match is not None, "the page lost its engine example"
    return match.group(1)


async def test_the_own_loop_example_compresses_truncates_and_answers(
    capsys: Any,
) -> None:
    namespace: dict[str, Any] = {}
    exec(compile(engine_example(), str(PAGE), "exec"), namespace)
    replies = [*(tool_reply(("cat", {"path": f"log{i}.txt"})) for i in range(6)), "6 logs."]

    def respond(request: ScriptedRequest) -> ScriptedReply:
        return SUMMARY if request.is_summary else replies.pop(0)

    model = ScriptedModel(respond, context_size=8000)

    async def call_tool(call: ToolCallBlock) -> str:
        return "\n".join(f"{call.input['path']} line {n}: ok" for n in range(400))

    answer = await namespace["run"](
        model, [ToolSpec(name="cat")], call_tool, "Count the lines of the logs."
    )
    assert answer == "6 logs."
    assert replies == []
    printed = capsys.readouterr().out
    assert "type='truncation'" in printed
    assert "type='compression'" in printed
