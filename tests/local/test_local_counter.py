"""LlamaTokenCounter counts exactly what llama.cpp evaluates."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextfold.message import (
    CHATML_FUNCTION_CALLING_TEMPLATE,
    Msg,
    TextBlock,
    ToolCallBlock,
    ToolResultBlock,
    ToolSpec,
    to_openai_messages,
    to_openai_tool_choice,
    to_openai_tools,
)
from contextfold.model import LocalChatModel
from contextfold.token import TokenCounter
from contextfold.token._llama import LlamaTokenCounter
from tests.sample_tools import SEARCH, WEATHER

from .localmodel_cases import conversation

_FIXTURE_CHECK = HealthCheck.function_scoped_fixture

# Ordered so that consecutive requests share a prompt prefix, which llama.cpp reuses.
CASES = {
    "plain": (lambda: conversation()[:2], [], None),
    "history with tool call and result": (conversation, [], None),
    "tools offered but none": (conversation, [WEATHER, SEARCH], "none"),
    "tools offered": (conversation, [WEATHER, SEARCH], "auto"),
    "tool forced": (conversation, [WEATHER, SEARCH], "get_weather"),
    "no system message, forced": (lambda: conversation()[1:], [WEATHER, SEARCH], "get_weather"),
}


def test_is_a_token_counter(local_counter: LlamaTokenCounter) -> None:
    assert isinstance(local_counter, TokenCounter)


@pytest.mark.parametrize("case", list(CASES))
async def test_count_equals_prompt_tokens_the_local_model_reports(
    case: str, counting_model: LocalChatModel
) -> None:
    make, tools, choice = CASES[case]
    messages = make()
    response = await counting_model.generate(messages, tools=tools, tool_choice=choice)
    assert response.usage is not None
    expected = counting_model.token_counter.count_request(messages, tools, tool_choice=choice)
    assert response.usage.input_tokens == expected


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][2] != "auto"])
def test_server_count_equals_prompt_tokens_of_llama_cpp_chat_handler(
    case: str, server_counter: LlamaTokenCounter, llama_server_format: Any
) -> None:
    make, tools, choice = CASES[case]
    messages = make()
    extra: dict[str, Any] = {}
    if tools:
        extra = {"tools": to_openai_tools(tools), "tool_choice": to_openai_tool_choice(choice)}
    reply = llama_server_format.create_chat_completion(
        messages=to_openai_messages(messages), max_tokens=1, **extra
    )
    assert (
        server_counter.count_request(messages, tools, tool_choice=choice)
        == (reply["usage"]["prompt_tokens"])
    )


@pytest.mark.model  # needs llama-cpp-python, which .ci/run installs for the model lane only
def test_template_copy_matches_installed_llama_cpp() -> None:
    llama_chat_format = pytest.importorskip(
        "llama_cpp.llama_chat_format", reason="llama-cpp-python: the 'server' extra"
    )

    code = llama_chat_format.chatml_function_calling.__code__
    templates = [c for c in code.co_consts if isinstance(c, str) and c.startswith("{% for")]
    assert templates == [CHATML_FUNCTION_CALLING_TEMPLATE]


_PIECES = [*"ab xyz\n\t{}\"'<>&:.,_-0123456789", "東京", "🌧", "é", "<|im_end|>", "\n\n"]
texts = st.lists(st.sampled_from(_PIECES), max_size=30).map("".join)


@st.composite
def messages(draw: st.DrawFn) -> list[Msg]:
    out: list[Msg] = []
    for i in range(draw(st.integers(0, 5))):
        kind = draw(st.sampled_from(["system", "user", "assistant", "call", "result"]))
        text = draw(texts)
        if kind == "call":
            call = ToolCallBlock(id=f"c{i}", name="get_weather", input={"city": text})
            out.append(Msg("a", [TextBlock(text=text), call], "assistant"))
        elif kind == "result":
            result = ToolResultBlock(
                id=f"c{i}", name="get_weather", output=text, is_error=i % 2 == 0
            )
            out.append(Msg("u", [result, TextBlock(text=text)], "user"))
        else:
            out.append(Msg(kind, text, kind))
    return out


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(msgs=messages(), n_tools=st.integers(0, 2))
def test_local_request_is_sum_of_messages_tools_and_overhead(
    msgs: list[Msg], n_tools: int, local_counter: LlamaTokenCounter
) -> None:
    tools: list[ToolSpec] = [WEATHER, SEARCH][:n_tools]
    whole = len(local_counter.tokenize(local_counter.render_prompt(msgs, tools), add_bos=True))
    parts = (
        sum(local_counter.count_message(m) for m in msgs)
        + local_counter.count_tools(tools)
        + local_counter.count_request([], ())
    )
    assert whole == parts == local_counter.count_request(msgs, tools)


def test_server_framing_is_additive_without_tools(server_counter: LlamaTokenCounter) -> None:
    msgs = conversation()
    assert server_counter.count_request(msgs) == (
        sum(server_counter.count_message(m) for m in msgs) + server_counter.count_request([])
    )


def test_server_framing_repeats_tool_list_in_every_system_message(
    server_counter: LlamaTokenCounter,
) -> None:
    # The documented non-additivity: one extra tool block per extra system message.
    one = [Msg("system", "A", "system"), Msg("user", "hi", "user")]
    two = [Msg("system", "A", "system"), Msg("system", "B", "system"), Msg("user", "hi", "user")]
    extra_message = server_counter.count_message(two[1])
    delta = server_counter.count_request(two, [WEATHER]) - server_counter.count_request(
        one, [WEATHER]
    )
    assert delta == extra_message + server_counter.count_tools([WEATHER])


def test_message_count_is_cached_on_the_message(local_counter: LlamaTokenCounter) -> None:
    msg = Msg("user", "hello there", "user")
    n = local_counter.count_message(msg)
    assert msg.cached_tokens(local_counter.name) == n > 0


def test_cjk_text_is_counted_with_the_models_own_tokenizer(
    local_counter: LlamaTokenCounter,
) -> None:
    text = "上下文压缩让智能体在长任务中保持在窗口之内。"
    assert local_counter.count_text(text) == len(local_counter.tokenize(text))
    assert local_counter.count_text(text) > len(text) // 4


@given(text=texts, budget=st.integers(0, 12))
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
def test_head_and_tail_fit_the_budget(
    text: str, budget: int, local_counter: LlamaTokenCounter
) -> None:
    head, tail = local_counter.head(text, budget), local_counter.tail(text, budget)
    assert text.startswith(head)
    assert text.endswith(tail)
    assert local_counter.count_text(head) <= budget
    assert local_counter.count_text(tail) <= budget
