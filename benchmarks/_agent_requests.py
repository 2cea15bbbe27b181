"""Our real ``Agent``'s Anthropic requests for a recorded run, as the official SDK sends them.

``contextfold.agent.Agent`` runs with ``contextfold.model.AnthropicChatModel`` (prompt
caching on, its default) and the official ``anthropic`` client, whose HTTP transport is an
``httpx.MockTransport``: every request body the SDK puts on the wire is kept, and the
answer is the next recorded assistant turn (its thought and one ``bash`` tool call).
Compaction summaries go through ``ModelSummarizer`` on the same model, so each summary
call is a real request too; its answer is the extractive summary of the same span (the
summarizer every system in the cost figure gets). Nothing leaves the process.
"""

from __future__ import annotations

import json
from typing import Any

from ._data import FINAL_TEXT, Session

__all__ = ["MODEL", "agent_requests"]

MODEL = "claude-sonnet-4-5"


class _Replayer:
    """The fake Messages API: records each body, answers from the recording."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.step = 0
        self.bodies: list[tuple[str, int, dict[str, Any]]] = []
        self.summary_outputs: list[str] = []
        """The text of each summary answer (its output tokens are priced)."""
        self.summary_fields: dict[str, str] | None = None
        """Set while a summary call is in flight: the fields to answer with."""

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.summary_fields is not None:
            self.bodies.append(("summary", self.step, body))
            return self._summary(body)
        self.bodies.append(("reasoning", self.step, body))
        steps = self.session.steps
        if self.step >= len(steps):
            return _message([{"type": "text", "text": FINAL_TEXT}], "end_turn")
        st = steps[self.step]
        self.step += 1
        content: list[dict[str, Any]] = []
        if st.thought:
            content.append({"type": "text", "text": st.thought})
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_{self.step}",
                "name": "bash",
                "input": {"command": st.command},
            }
        )
        return _message(content, "tool_use")

    def _summary(self, body: dict[str, Any]) -> dict[str, Any]:
        fields = self.summary_fields
        assert fields is not None
        self.summary_outputs.append(json.dumps(fields, ensure_ascii=False))
        choice = body.get("tool_choice") or {}
        if choice.get("type") == "tool":  # the transcript form: a forced tool call
            call = {"type": "tool_use", "id": "toolu_summary", "name": choice["name"]}
            return _message([{**call, "input": fields}], "tool_use")
        return _message([{"type": "text", "text": json.dumps(fields)}], "end_turn")


def _message(content: list[dict[str, Any]], stop: str) -> dict[str, Any]:
    return {
        "id": "msg_replay",
        "type": "message",
        "role": "assistant",
        "model": MODEL,
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
    }


async def agent_requests(
    session: Session, *, context_size: int, tool_result_limit: int, default_tools: bool = True
) -> tuple[list[tuple[str, int, dict[str, Any]]], list[str]]:
    """``(kind, step, body)`` of every Messages API call our ``Agent`` makes replaying
    ``session`` (``reasoning`` and ``summary`` calls, in order), and the text of each
    summary answer. ``default_tools=False`` leaves out the tools ``Agent`` adds by default
    (Read/Grep/Glob/Search over the workspace, TaskCreate/TaskUpdate/TaskList)."""
    import httpx2 as httpx

    from contextfold.agent import Agent
    from contextfold.context import ContextConfig, ExtractiveSummarizer, ModelSummarizer
    from contextfold.message import Msg
    from contextfold.model import AnthropicChatModel
    from contextfold.token import counter_for_model
    from contextfold.tool import Toolkit
    from contextfold.workspace import MemoryWorkspace

    replayer = _Replayer(session)

    def handle(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=replayer.answer(json.loads(request.content)))

    client = httpx.AsyncClient(transport=httpx.MockTransport(handle))
    model = AnthropicChatModel(
        MODEL,
        api_key="replay",
        context_size=context_size,
        http_client=client,
        token_counter=counter_for_model("gpt-4o"),
    )
    extractive = ExtractiveSummarizer()
    asking = ModelSummarizer(model)

    class Summarizer:
        """``ModelSummarizer`` on the same model, answered with the extractive fields."""

        async def summarize(self, request: Any) -> Any:
            replayer.summary_fields = (await extractive.summarize(request)).fields
            try:
                return await asking.summarize(request)
            finally:
                replayer.summary_fields = None

    outputs = iter(s.output for s in session.steps)

    async def bash(command: str) -> str:
        """Run a shell command.

        Args:
            command: The command to run.
        """
        return next(outputs, "")

    workspace = MemoryWorkspace()
    await workspace.initialize()
    agent = Agent(
        name="replay",
        system_prompt=session.system,
        model=model,
        toolkit=Toolkit([bash]),
        context_config=ContextConfig(tool_result_limit=tool_result_limit),
        offloader=workspace,
        summarizer=Summarizer(),
        max_iters=len(session.steps) + 10,
        readback_tools=default_tools,
        tasks_enabled=default_tools,
    )
    try:
        await agent.reply(Msg("user", session.task, "user"))
    finally:
        await client.aclose()
    if replayer.step != len(session.steps):
        raise RuntimeError(
            f"Agent replay of {session.name} stopped at step {replayer.step} of "
            f"{len(session.steps)}"
        )
    return replayer.bodies, replayer.summary_outputs
