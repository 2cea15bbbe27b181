"""Every item the Agents SDK can put in its history passes through the input filter
(issue 26: a ``web_search_call`` raised ``MessageFormatError`` on the next call): a real
``Runner`` run over several turns and past compactions, whose history holds every type of
the Responses input union, hosted tools' calls and outputs, images and reasoning."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

pytest.importorskip("agents", reason="needs contextfold[openai-agents]")

from agents import Agent, Model, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.items import ModelResponse
from agents.usage import Usage
from openai.types.responses import ResponseOutputItem
from pydantic import TypeAdapter

from contextfold.context import CompressionEvent, ContextEvent, ImageRemovalEvent
from contextfold.integrations.openai_agents import (
    BLANK_SCREENSHOT,
    AgentsCodec,
    ContextfoldInputFilter,
)
from contextfold.message import TextBlock
from contextfold.model import ScriptedModel
from contextfold.workspace import MemoryWorkspace

from .items import (
    CALLS_PER_TURN,
    CONFIG,
    CONTEXT_SIZE,
    MAX_IMAGES,
    TURNS,
    data_url,
    log_text,
    png_b64,
)

OUTPUT = TypeAdapter(ResponseOutputItem)

# Each pair type: (call type, output type, the call's id field, the output's id field).
PAIRS = [
    ("function_call", "function_call_output", "call_id", "call_id"),
    ("computer_call", "computer_call_output", "call_id", "call_id"),
    ("local_shell_call", "local_shell_call_output", "call_id", "id"),
    ("shell_call", "shell_call_output", "call_id", "call_id"),
    ("apply_patch_call", "apply_patch_call_output", "call_id", "call_id"),
    ("custom_tool_call", "custom_tool_call_output", "call_id", "call_id"),
    ("tool_search_call", "tool_search_output", "call_id", "call_id"),
    ("program", "program_output", "call_id", "call_id"),
    ("mcp_approval_request", "mcp_approval_response", "id", "approval_request_id"),
]


def foreign_items(t: int) -> list[dict[str, Any]]:
    """One of every item type of ``ResponseInputItemParam`` (besides plain messages and
    function calls, which the scripted model makes), ids suffixed with the turn."""
    shot = {"type": "computer_screenshot", "image_url": data_url(40 + t)}
    return [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": f"Here is screen {t}."},
                {"type": "input_image", "image_url": data_url(t), "detail": "high"},
                {"type": "input_file", "file_id": f"file-{t}", "filename": f"spec{t}.pdf"},
            ],
        },
        {"type": "reasoning", "id": f"rs_{t}", "summary": [], "encrypted_content": "gAAA" * 20},
        {
            "type": "web_search_call",
            "id": f"ws_{t}",
            "status": "completed",
            "action": {"type": "search", "query": f"service {t} outage"},
        },
        {
            "type": "file_search_call",
            "id": f"fs_{t}",
            "status": "completed",
            "queries": ["retry policy"],
            "results": [{"file_id": "file-1", "filename": "ops.md", "text": "Retry thrice."}],
        },
        {
            "type": "computer_call",
            "id": f"cu_{t}",
            "call_id": f"call_cu_{t}",
            "status": "completed",
            "action": {"type": "screenshot"},
            "pending_safety_checks": [],
        },
        {"type": "computer_call_output", "call_id": f"call_cu_{t}", "output": shot},
        {
            "type": "code_interpreter_call",
            "id": f"ci_{t}",
            "status": "completed",
            "container_id": "cntr_1",
            "code": "print(6 * 7)",
            "outputs": [{"type": "logs", "logs": "42"}],
        },
        {
            "type": "image_generation_call",
            "id": f"ig_{t}",
            "status": "completed",
            "result": png_b64(90 + t),
        },
        {
            "type": "local_shell_call",
            "id": f"ls_{t}",
            "call_id": f"call_ls_{t}",
            "status": "completed",
            "action": {"type": "exec", "command": ["ls", "-la"], "env": {}},
        },
        {"type": "local_shell_call_output", "id": f"call_ls_{t}", "output": "total 0"},
        {
            "type": "shell_call",
            "call_id": f"call_sh_{t}",
            "action": {"commands": ["pytest -q"]},
            "status": "completed",
        },
        {
            "type": "shell_call_output",
            "call_id": f"call_sh_{t}",
            "output": [
                {"stdout": "3 passed", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}
            ],
        },
        {
            "type": "apply_patch_call",
            "call_id": f"call_ap_{t}",
            "status": "completed",
            "operation": {"type": "update_file", "path": "src/app.py", "diff": "@@\n-a\n+b\n"},
        },
        {
            "type": "apply_patch_call_output",
            "call_id": f"call_ap_{t}",
            "status": "completed",
            "output": "patched src/app.py",
        },
        {"type": "custom_tool_call", "call_id": f"call_ct_{t}", "name": "grammar", "input": "x+1"},
        {"type": "custom_tool_call_output", "call_id": f"call_ct_{t}", "output": "parsed"},
        {"type": "tool_search_call", "call_id": f"call_ts_{t}", "arguments": {"query": "git"}},
        {"type": "tool_search_output", "call_id": f"call_ts_{t}", "tools": []},
        {"type": "program", "id": f"pg_{t}", "call_id": f"call_pg_{t}", "code": "1+1"},
        {
            "type": "program_output",
            "id": f"po_{t}",
            "call_id": f"call_pg_{t}",
            "status": "completed",
            "output": "2",
        },
        {
            "type": "mcp_list_tools",
            "id": f"ml_{t}",
            "server_label": "deploys",
            "tools": [{"name": "rollback", "input_schema": {"type": "object"}}],
        },
        {
            "type": "mcp_approval_request",
            "id": f"mr_{t}",
            "server_label": "deploys",
            "name": "rollback",
            "arguments": '{"service": 1}',
        },
        {"type": "mcp_approval_response", "approval_request_id": f"mr_{t}", "approve": True},
        {
            "type": "mcp_call",
            "id": f"mc_{t}",
            "server_label": "deploys",
            "name": "rollback",
            "arguments": '{"service": 1}',
            "output": "rolled back",
        },
        {"type": "compaction", "id": f"cp_{t}", "encrypted_content": "gAAB" * 10},
        {"type": "item_reference", "id": f"ws_{t}"},
        {
            "role": "user",
            "content": f"Check service {t}: read its logs with read_log {CALLS_PER_TURN} times.",
        },
    ]


class ScriptedAgentsModel(Model):
    """A minimal Agents SDK model: per user turn, ``CALLS_PER_TURN`` calls of ``read_log``
    and then an answer after a hosted web search. Records every input it receives."""

    def __init__(self) -> None:
        self.inputs: list[list[dict[str, Any]]] = []

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [i if isinstance(i, dict) else i.model_dump(exclude_unset=True) for i in input]
        self.inputs.append(copy.deepcopy(items))
        turn = sum(1 for i in items if "Check service" in json.dumps(i) and i.get("role") == "user")
        made = sum(
            1
            for i in items
            if i.get("type") == "function_call" and str(i.get("call_id")).startswith(f"t{turn}-")
        )
        if made < CALLS_PER_TURN:
            call = {
                "type": "function_call",
                "id": f"fc_t{turn}-{made}",
                "call_id": f"t{turn}-{made}",
                "name": "read_log",
                "arguments": json.dumps({"turn": turn, "call": made}),
            }
            output = [OUTPUT.validate_python(call)]
        else:
            search = {
                "type": "web_search_call",
                "id": f"ws_answer_{turn}",
                "status": "completed",
                "action": {"type": "search", "query": "status page"},
            }
            answer = {
                "type": "message",
                "id": f"msg_{turn}",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": f"Service {turn} is fine.", "annotations": []}
                ],
            }
            output = [OUTPUT.validate_python(search), OUTPUT.validate_python(answer)]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError


@function_tool
def read_log(turn: int, call: int) -> str:
    """Read one log.

    Args:
        turn: The turn.
        call: The log's number.
    """
    return log_text(turn, call)


def pair_key(item: dict[str, Any]) -> tuple[str, str] | None:
    for call, output, call_field, output_field in PAIRS:
        if item.get("type") == call:
            return (call, str(item.get(call_field)))
        if item.get("type") == output:
            return (call, str(item.get(output_field)))
    return None


def images(items: list[dict[str, Any]]) -> int:
    """Real images the model received (a removed screenshot is a 1x1 blank)."""
    text = json.dumps(items)
    return text.count("iVBORw0KGgo") - text.count(BLANK_SCREENSHOT.split(",", 1)[1])


async def test_every_item_type_passes_through_a_run_past_compactions() -> None:
    set_tracing_disabled(True)
    events: list[ContextEvent] = []
    summaries = ScriptedModel(
        lambda request: {
            "task_overview": "Check the services.",
            "current_state": "Logs read.",
            "important_discoveries": "None.",
            "next_steps": "Next service.",
            "context_to_preserve": "ids",
        },
        context_size=32_000,
    )
    from contextfold.context import ModelSummarizer

    folding = ContextfoldInputFilter(
        counter=summaries.token_counter,
        context_size=CONTEXT_SIZE,
        summarizer=ModelSummarizer(summaries),
        offloader=MemoryWorkspace(),
        config=CONFIG,
        on_event=events.append,
    )
    model = ScriptedAgentsModel()
    agent = Agent(name="ops", instructions="You run ops.", model=model, tools=[read_log])
    history: list[Any] = []
    given: dict[str, str] = {}
    for t in range(TURNS):
        new = foreign_items(t)
        for item in new:
            given[json.dumps(item, sort_keys=True)] = item.get("type", "message")
        result = await Runner.run(
            agent,
            [*history, *new],
            run_config=RunConfig(call_model_input_filter=folding),
            max_turns=20,
        )
        history = result.to_input_list()

    assert len(model.inputs) == TURNS * (CALLS_PER_TURN + 1)
    assert any(isinstance(e, CompressionEvent) for e in events)
    assert any(isinstance(e, ImageRemovalEvent) for e in events)
    kinds_kept: set[str] = set()
    for sent in model.inputs:
        # Pairs intact: every call has its output in the same request and back.
        keys = [pair_key(i) for i in sent]
        calls = {k for k, i in zip(keys, sent, strict=True) if k and i["type"] == k[0]}
        outputs = {k for k, i in zip(keys, sent, strict=True) if k and i["type"] != k[0]}
        assert calls == outputs
        assert images(sent) <= MAX_IMAGES
        # Kept items are passed back exactly as they came.
        for item in sent:
            kind = given.get(json.dumps(item, sort_keys=True))
            if kind is not None:
                kinds_kept.add(kind)
    # Every foreign type was, at some call, sent back unchanged.
    assert kinds_kept >= {i.get("type", "message") for i in foreign_items(0)} - {"message"}


def _groups() -> list[list[dict[str, Any]]]:
    """Each foreign item alone, a call with its output."""
    items = [i for i in foreign_items(0) if i.get("type") not in (None, "reasoning")]
    groups: list[list[dict[str, Any]]] = []
    for item in items:
        key = pair_key(item)
        if key is not None and item["type"] != key[0]:
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


@pytest.mark.parametrize("group", _groups(), ids=lambda g: g[0]["type"])
def test_each_item_type_converts_back_exactly_as_it_came(group: list[dict[str, Any]]) -> None:
    # What a resumed folder (which has only the engine's messages) sends back.
    codec = AgentsCodec()
    back = [item for msg, _ in codec.to_msgs(group) for item in codec.from_msg(msg)]
    assert back == group


def test_a_user_message_with_an_image_and_a_file_converts_back() -> None:
    message = foreign_items(0)[0]
    message["content"][1]["detail"] = "auto"  # the one field an image block does not keep
    codec = AgentsCodec()
    ((msg, _),) = codec.to_msgs([message])
    assert [b.type for b in msg.blocks()] == ["text", "data", "text"]
    assert codec.from_msg(msg) == [message]


def test_a_cut_output_goes_back_as_its_own_type() -> None:
    codec = AgentsCodec()
    call, output = [i for i in foreign_items(0) if i.get("call_id") == "call_sh_0"]
    (_, (msg, _)) = codec.to_msgs([call, output])
    (result,) = msg.tool_results
    cut = msg.model_copy(update={"content": [result.model_copy(update={"output": "3 pa[cut]"})]})
    (item,) = codec.from_msg(cut)
    assert item["type"] == "shell_call_output"
    assert item["call_id"] == "call_sh_0"
    assert item["output"] == [
        {"stdout": "3 pa[cut]", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}
    ]


def test_a_removed_screenshot_is_a_blank_and_the_placeholder_follows() -> None:
    codec = AgentsCodec()
    call, output = [i for i in foreign_items(0) if i.get("call_id") == "call_cu_0"]
    (_, (msg, _)) = codec.to_msgs([call, output])
    (result,) = msg.tool_results
    removed = result.model_copy(update={"output": [TextBlock(text="[An image was removed]")]})
    item, note = codec.from_msg(msg.model_copy(update={"content": [removed]}))
    assert item["output"] == {"type": "computer_screenshot", "image_url": BLANK_SCREENSHOT}
    assert note == {"role": "user", "content": "[An image was removed]"}


def test_a_function_output_with_an_image_keeps_it_when_cut() -> None:
    codec = AgentsCodec()
    call = {"type": "function_call", "call_id": "c1", "name": "shot", "arguments": "{}"}
    output = {
        "type": "function_call_output",
        "call_id": "c1",
        "output": [
            {"type": "input_text", "text": "a long log"},
            {"type": "input_image", "image_url": data_url(7), "detail": "auto"},
        ],
    }
    (_, (msg, _)) = codec.to_msgs([call, output])
    (result,) = msg.tool_results
    assert [b.type for b in result.output] == ["text", "data"]  # the image is counted
    _, image = result.output
    cut = result.model_copy(update={"output": [TextBlock(text="a lo[cut]"), image]})
    (item,) = codec.from_msg(msg.model_copy(update={"content": [cut]}))
    assert item["output"] == [{"type": "input_text", "text": "a lo[cut]"}, output["output"][1]]


def test_an_inline_file_is_a_data_block_and_converts_back() -> None:
    pdf = "data:application/pdf;base64," + png_b64(1)
    message = {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "Read this."},
            {"type": "input_file", "filename": "spec.pdf", "file_data": pdf},
        ],
    }
    codec = AgentsCodec()
    ((msg, _),) = codec.to_msgs([message])
    (data,) = msg.iter_data()
    assert (data.kind, data.name) == ("file", "spec.pdf")
    assert codec.from_msg(msg) == [message]


def test_a_server_side_tool_search_without_call_ids_is_not_a_pair() -> None:
    # Executed by the server, a tool search and its output carry no call id: two such
    # searches must not be taken for calls of one id.
    items = [
        {"type": "tool_search_call", "id": f"ts{i}", "arguments": {"q": i}, "execution": "server"}
        for i in range(2)
    ] + [{"type": "tool_search_output", "id": "to1", "tools": [], "execution": "server"}]
    codec = AgentsCodec()
    ((msg, _),) = codec.to_msgs(items)
    assert msg.role == "assistant"
    assert not msg.tool_calls
    assert codec.from_msg(msg) == items
