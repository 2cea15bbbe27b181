"""Deterministic sessions whose every request is recorded: the safety net of refactors.

Each scenario drives the engine as a user's code does (our ``Agent``, and the
``HistoryFolder`` with each framework's real codec and item types), with scripted models
for the agent and for a model summarizer, over several user turns with large tool results
so that truncation, offload and more than one compaction (append and rewrite) happen. What
is recorded is every request as the models received it, in the OpenAI wire form, and every
folded history as the framework's own items; timestamps are blanked. A refactor that leaves
behaviour alone leaves every scenario's digest unchanged (``tests/golden/digests.json``).

Recorded first on fc7b2cc. Issue 25 changed three on purpose: ``agent-custom-template``
(the engine's additions now follow a user's template that has no ``{artifacts}``; they
were spliced into its ``{context_to_preserve}``), ``langchain`` and ``pydantic-ai`` (the
summary item carries the layer's JSON document instead of the message's metadata: what
the model is sent is unchanged) and ``openai-agents`` (a summary of several parts is sent
as one ``input_text`` per part, so it reads back part for part). ``agent-append`` and
``agent-rewrite`` are byte-identical to fc7b2cc. Issue 26 changed all six: the user's
request in progress is kept, verbatim, at the head of the kept context instead of being
folded (before, it was missing from 15 of 26 of the agent's requests); then the offload
references, once the same content stopped being offloaded twice (24 offloads became 19;
identical otherwise, reference numbers aside). Then all six again when the user's earlier
messages stayed word for word in the summary layer (``LayerConfig.request_ratio``): each
summary shows the turns it folded.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from contextfold import Agent
from contextfold.context import ContextConfig, LayerConfig, ModelSummarizer
from contextfold.message import Msg, ToolCallBlock, ToolResultBlock, to_openai_messages
from contextfold.model import ScriptedModel, ScriptedRequest, tool_reply
from contextfold.tool import Toolkit

_UUID = re.compile(r"\b[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\b")
_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:\+00:00| UTC)?")
SYSTEM = "You investigate services with the tools. Answer briefly."
TURNS = 4
CALLS_PER_TURN = 4


class CountingOffloader:
    """An offloader whose references are numbered (a real workspace adds a random
    suffix when a name repeats, which would make the recording differ run to run)."""

    def __init__(self) -> None:
        self.saved: list[object] = []

    async def offload_context(self, session_id: str, msgs: list[Msg], **kwargs: Any) -> str:
        self.saved.append(list(msgs))
        return f"sessions/{session_id}/context-{len(self.saved):03d}.jsonl"

    async def offload_tool_result(
        self, session_id: str, tool_result: ToolResultBlock, **kwargs: Any
    ) -> str:
        self.saved.append(tool_result)
        return f"sessions/{session_id}/result-{len(self.saved):03d}.txt"


def log_text(service: int, call: int) -> str:
    lines = [
        f"svc{service} call{call} line {i}: GET /api/v{i % 3}/items status 200 in {i * 7 % 90} ms"
        for i in range(220)
    ]
    lines.insert(
        110, f"svc{service} line 110: ERROR E{service}{call}7 in src/svc{service}/mod{call}.py:42"
    )
    return "\n".join(lines)


def _fields(request: ScriptedRequest) -> dict[str, str]:
    """The scripted summarizer's answer: derived from the request, so it differs per call."""
    n = sum(len(m.text) for m in request.messages)
    return {
        "task_overview": f"Investigate the services (request of {len(request.messages)} messages).",
        "current_state": f"Logs read; the request held {n} characters of text.",
        "important_discoveries": "Errors E*7 in src/svc*/mod*.py:42.",
        "next_steps": "Read the next service's logs.",
        "context_to_preserve": "Paths src/svc*/mod*.py.",
    }


def _summarizer_model() -> ScriptedModel:
    def reply(request: ScriptedRequest) -> dict[str, str]:
        return _fields(request)

    return ScriptedModel(reply, context_size=16_000)


def _agent_model() -> ScriptedModel:
    """Per user turn: CALLS_PER_TURN tool calls (ids ``t<turn>-<call>``), then an answer."""

    def reply(request: ScriptedRequest) -> Any:
        asked = [m.text for m in request.messages if m.role == "user"]
        found = next(
            (re.search(r"Check service (\d+)", t) for t in reversed(asked) if "Check service" in t),
            None,
        )
        turn = int(found.group(1)) if found else 0
        made = sum(
            1 for m in request.messages for c in m.tool_calls if c.id.startswith(f"t{turn}-")
        )
        if made < CALLS_PER_TURN:
            call = ToolCallBlock(
                id=f"t{turn}-{made}", name="read_log", input={"service": turn, "call": made}
            )
            return tool_reply(call)
        return f"Service {turn}: error E{turn}{made - 1}7."

    return ScriptedModel(reply, context_size=6000)


def _wire(messages: list[Msg]) -> list[dict[str, Any]]:
    return to_openai_messages(messages)


def _scrub(value: Any) -> Any:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False, default=str)
    return json.loads(_UUID.sub("<id>", _TIME.sub("<time>", text)))


def _config(mode: str, template: str | None) -> ContextConfig:
    options: dict[str, Any] = {
        "trigger_ratio": 0.7,
        "reserve_ratio": 0.1,
        "tool_result_limit": 600,
        "layer": LayerConfig(update=mode),
    }
    if template is not None:
        options["summary_template"] = template
    return ContextConfig(**options)


CUSTOM_TEMPLATE = (
    "Summary so far.\nKeep: {context_to_preserve}\nTask: {task_overview}\n"
    "State: {current_state}\nFound: {important_discoveries}\nNext: {next_steps}"
)
"""A user's template without ``{artifacts}``: the engine's additions go after it."""

SCENARIOS = {
    "agent-append": ("append", None),
    "agent-rewrite": ("rewrite", None),
    "agent-custom-template": ("append", CUSTOM_TEMPLATE),
}


async def agent_scenario(name: str, turns: list[int] | None = None) -> dict[str, Any]:
    """``turns``, when given, receives the turn of each agent request, in order."""
    mode, template = SCENARIOS[name]
    model, summary_model = _agent_model(), _summarizer_model()
    toolkit = Toolkit()

    @toolkit.register
    def read_log(service: int, call: int) -> str:
        """Read one log.

        Args:
            service: The service number.
            call: The log's number.
        """
        return log_text(service, call)

    workspace = CountingOffloader()
    agent = Agent(
        name="golden",
        session_id="golden",
        system_prompt=SYSTEM,
        model=model,
        toolkit=toolkit,
        context_config=_config(mode, template),
        offloader=workspace,
        summarizer=ModelSummarizer(summary_model),
    )
    replies = []
    for turn in range(TURNS):
        reply = await agent.reply(
            Msg("user", f"Check service {turn} and report its error.", "user")
        )
        replies.append(reply.text)
        if turns is not None:
            turns.extend([turn] * (len(model.requests) - len(turns)))
    return _scrub(
        {
            "replies": replies,
            "agent": [_wire(r.messages) for r in model.requests],
            "summarizer": [_wire(r.messages) for r in summary_model.requests],
        }
    )


def digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()


def without_nulls(value: Any) -> Any:
    """``value`` without the keys whose value is null: a field a newer framework release
    adds to its own serialization as null (pydantic-ai 2.78 added ``duration``,
    ``request_timestamp`` and ``ui_visibility``) is no change of ours."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def framework_digest(value: Any) -> str:
    """The digest of a framework session's recording, null fields aside."""
    return digest(without_nulls(value))


Runner = Callable[[str], Awaitable[dict[str, Any]]]


def _codec(framework: str) -> tuple[Any, bool, Callable[[list[Any]], Any]]:
    """The framework's codec, whether it stores the folded history, and how its items
    are written down (the framework's own serialization)."""
    if framework == "langchain":
        from langchain_core.messages import messages_to_dict

        from contextfold.integrations.langchain import LangChainCodec

        def dump_lc(items: list[Any]) -> Any:
            return [{k: v for k, v in d.items() if k != "id"} for d in messages_to_dict(items)]

        return LangChainCodec(), True, dump_lc
    if framework == "pydantic-ai":
        from pydantic_ai.messages import ModelMessagesTypeAdapter

        from contextfold.integrations.pydantic_ai import PydanticAICodec

        def dump_pa(items: list[Any]) -> Any:
            return ModelMessagesTypeAdapter.dump_python(items, mode="json")

        return PydanticAICodec(), True, dump_pa
    from contextfold.integrations.openai_agents import AgentsCodec

    def dump_oa(items: list[Any]) -> Any:
        return [i if isinstance(i, dict) else i.model_dump(mode="json") for i in items]

    return AgentsCodec(), False, dump_oa


FRAMEWORKS = ("langchain", "pydantic-ai", "openai-agents")


async def folder_scenario(framework: str, turns: list[int] | None = None) -> dict[str, Any]:
    """A framework's loop around the ``HistoryFolder`` and its real codec: the framework
    holds the history (the folded one, or its own), the scripted model answers what the
    folder sent, tool results come back as the framework's items."""
    from contextfold.context import ContextEngine
    from contextfold.integrations import HistoryFolder

    codec, rewrites, dump = _codec(framework)
    model, summary_model = _agent_model(), _summarizer_model()
    engine = ContextEngine(
        counter=model.token_counter,
        context_size=model.context_size,
        summarizer=ModelSummarizer(summary_model),
        config=_config("append", None),
        offloader=CountingOffloader(),
    )
    folder: HistoryFolder[Any] = HistoryFolder(engine, codec, rewrites_history=rewrites)
    history: list[Any] = []
    requests: list[Any] = []
    for turn in range(TURNS):
        history.extend(codec.from_msg(Msg("user", f"Check service {turn} and report.", "user")))
        for _ in range(CALLS_PER_TURN + 1):
            folded = await folder.fold(history, SYSTEM)
            requests.append(dump(folded.request))
            if turns is not None:
                turns.append(turn)
            sent = [m for m, _ in codec.to_msgs(folded.request)]
            response = await model.generate([Msg("system", SYSTEM, "system"), *sent])
            answer = Msg("assistant", response.content, "assistant")
            base = folded.history if rewrites else history
            history = [*base, *codec.from_msg(answer)]
            calls = answer.tool_calls
            if not calls:
                break
            results = [
                ToolResultBlock(id=c.id, name=c.name, output=log_text(**c.input)) for c in calls
            ]
            history.extend(codec.from_msg(Msg("tool", list(results), "user")))
    return _scrub(
        {
            "requests": requests,
            "summarizer": [_wire(r.messages) for r in summary_model.requests],
        }
    )
