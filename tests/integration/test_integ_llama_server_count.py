"""Our token count of a request equals the ``prompt_tokens`` a real llama.cpp server reports.

The server is llama-cpp-python's OpenAI-compatible server on loopback serving the embedded
model with ``--chat_format chatml-function-calling`` (the session fixture ``llama_server``);
requests go through :class:`~contextfold.model.OpenAIChatModel`, and the count is
:class:`~contextfold.token._llama.LlamaTokenCounter` with the ``server`` framing.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

pytest.importorskip("openai", reason="needs contextfold[openai]")

from contextfold.message import (
    Msg,
    TextBlock,
    ToolCallBlock,
    ToolChoice,
    ToolResultBlock,
    ToolSpec,
    chatml_call_arguments,
)
from contextfold.model import ChatResponse, OpenAIChatModel
from contextfold.token._llama import LlamaTokenCounter
from tests.llama_server_process import LLAMA_CONTEXT
from tests.sample_tools import SEARCH, WEATHER

pytestmark = pytest.mark.slow

SYSTEM = Msg("system", "You are a helpful assistant. Be brief.", "system")


def history() -> list[Msg]:
    """Text, a tool call with its result, then a parallel pair, then a question."""
    return [
        SYSTEM,
        Msg("user", "Weather in Paris and Tokyo? Also find the install docs.", "user"),
        Msg(
            "assistant",
            [
                TextBlock(text="Checking Paris first."),
                ToolCallBlock(id="call_1", name="get_weather", input={"city": "Paris"}),
            ],
            "assistant",
        ),
        Msg(
            "user",
            [ToolResultBlock(id="call_1", name="get_weather", output="sunny, 21°C <b>ok</b>")],
            "user",
        ),
        Msg(
            "assistant",
            [
                ToolCallBlock(id="call_2", name="get_weather", input={"city": "東京"}),
                ToolCallBlock(id="call_3", name="search_docs", input={"query": "install"}),
            ],
            "assistant",
        ),
        Msg(
            "user",
            [
                ToolResultBlock(id="call_2", name="get_weather", output="rain, 12°C"),
                ToolResultBlock(id="call_3", name="search_docs", output='{"hits": ["a & b"]}'),
            ],
            "user",
        ),
        Msg("assistant", "Paris is sunny, Tokyo rainy; docs found.", "assistant"),
        Msg("user", "And tomorrow?", "user"),
    ]


Case = tuple[Callable[[], list[Msg]], list[ToolSpec], ToolChoice | None]

# Requests whose reported prompt_tokens is the size of the prompt as sent.
CASES: dict[str, Case] = {
    "plain": (lambda: [SYSTEM, Msg("user", "Say hello.", "user")], [], None),
    "cjk and emoji": (
        lambda: [SYSTEM, Msg("user", "东京的天气怎么样？日本語のテキスト。한국어 🌧", "user")],
        [],
        None,
    ),
    "tool calls and results in history": (history, [], None),
    "tools offered, tool_choice none": (history, [WEATHER, SEARCH], "none"),
    "tools offered, one forced": (history, [WEATHER, SEARCH], "get_weather"),
    "tools forced, no system message": (lambda: history()[1:], [WEATHER, SEARCH], "search_docs"),
}


@pytest.fixture(scope="module")
def counter() -> LlamaTokenCounter:
    return LlamaTokenCounter(framing="server")


@pytest.fixture
def model(llama_server: str, counter: LlamaTokenCounter) -> OpenAIChatModel:
    return OpenAIChatModel(
        "smollm2",
        base_url=llama_server,
        context_size=LLAMA_CONTEXT,
        max_tokens=8,  # enough for a whole character: a cut one is an empty answer
        temperature=0.0,
        seed=7,
        token_counter=counter,
    )


@pytest.mark.parametrize("case", list(CASES))
async def test_count_equals_prompt_tokens_reported_by_llama_server(
    case: str, model: OpenAIChatModel, counter: LlamaTokenCounter
) -> None:
    make, tools, choice = CASES[case]
    messages = make()
    response = await model.generate(messages, tools=tools, tool_choice=choice)
    assert response.usage is not None
    assert counter.count_request(messages, tools, tool_choice=choice) == (
        response.usage.input_tokens
    )


def handler_prompts(
    counter: LlamaTokenCounter,
    messages: list[Msg],
    tools: list[ToolSpec],
    response: ChatResponse,
) -> int:
    """What llama-cpp-python's ``auto`` handler reports as prompt tokens.

    It first lets the model choose between ``message:`` and ``functions.<name>:`` with a
    grammar, then runs a second completion on the prompt plus that choice, and reports
    that completion's prompt: the request plus ``message:\\n`` for a text answer, or, per
    tool call, the request plus every earlier call plus ``functions.<name>:\\n``, summed.
    """
    prompt = counter.render_prompt(messages, tools, "auto")
    calls = [b for b in response.content if isinstance(b, ToolCallBlock)]
    if not calls:
        return len(counter.tokenize(prompt + "message:\n", add_bos=True))
    total = 0
    for call in calls:
        prompt += f"functions.{call.name}:\n"
        total += len(counter.tokenize(prompt, add_bos=True))
        prompt += chatml_call_arguments(call) + "\n"
    return total


@pytest.mark.parametrize("choice", ["auto", None])
async def test_auto_tool_choice_reports_the_prompt_plus_the_handlers_choice(
    choice: ToolChoice | None, model: OpenAIChatModel, counter: LlamaTokenCounter
) -> None:
    # Not the size of the request: the server counts text the model generated in its
    # first stage. Our count is of the request, so it is lower by exactly that much.
    messages = [
        Msg("system", "Call get_weather for weather questions.", "system"),
        Msg("user", "What is the weather in Paris?", "user"),
    ]
    response = await model.generate(messages, tools=[WEATHER], tool_choice=choice)
    assert response.usage is not None
    assert response.usage.input_tokens == handler_prompts(counter, messages, [WEATHER], response)
    assert counter.count_request(messages, [WEATHER], tool_choice=choice) < (
        response.usage.input_tokens
    )
