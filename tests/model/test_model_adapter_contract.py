"""Every adapter passes the one adapter contract (see ``adapter_contract.py``)."""

from __future__ import annotations

import json
from typing import ClassVar

import pytest

pytest.importorskip("openai", reason="needs contextfold[openai]")
pytest.importorskip("anthropic", reason="needs contextfold[anthropic]")

from contextfold import _exceptions as errors
from contextfold.message import ContentBlock, Msg, TextBlock, ThinkingBlock, ToolCallBlock, Usage
from contextfold.model import (
    AnthropicChatModel,
    ChatModelBase,
    ChatResponse,
    OpenAIChatModel,
    ScriptedModel,
    ScriptedReply,
)
from tests.llama_server_process import LLAMA_CONTEXT, free_port

from .adapter_contract import AdapterContract, MakeModel, user
from .model_fakes import FakeAnthropic, FakeOpenAI
from .model_scenarios import SCENARIOS, SECRET_KEY, Failure, Reply, Turn

# ------------------------------------------------------------------------- ScriptedModel

_SCRIPTED_ERRORS = {
    "rate_limit": lambda: errors.RateLimitError("429", retry_after=7.0),
    "server_error": lambda: errors.ServerError("500", status_code=500),
    "context_window": lambda: errors.ContextWindowExceededError("too long", status_code=400),
    "auth": lambda: errors.AuthenticationError("bad key", status_code=401),
    "bad_request": lambda: errors.BadRequestError("bad", status_code=400),
    "connection": lambda: errors.ModelConnectionError("refused"),
    "timeout": lambda: errors.ModelTimeoutError("timed out"),
}


def _scripted_reply(turn: Turn) -> ScriptedReply:
    if isinstance(turn, Failure):
        return _SCRIPTED_ERRORS[turn.kind]()
    assert isinstance(turn, Reply)
    blocks: list[ContentBlock] = []
    if turn.thinking:
        blocks.append(ThinkingBlock(thinking=turn.thinking[0], signature=turn.thinking[1]))
    if turn.text:
        blocks.append(TextBlock(text=turn.text))
    for call_id, name, arguments in turn.tool_calls:
        try:
            blocks.append(
                ToolCallBlock(
                    id=call_id, name=name, input=json.loads(arguments), raw_input=arguments
                )
            )
        except ValueError:
            blocks.append(
                ToolCallBlock(
                    id=call_id,
                    name=name,
                    raw_input=arguments,
                    input_error="arguments are not valid JSON",
                )
            )
    usage = Usage(
        input_tokens=turn.input_tokens,
        output_tokens=turn.output_tokens,
        cache_read_tokens=turn.cached_tokens,
    )
    stop = "tool_use" if turn.tool_calls else "end_turn"
    return ChatResponse(content=blocks, usage=usage, stop_reason=stop)


class TestScriptedModelContract(AdapterContract):
    can_cut_streams = False
    streams_tool_deltas = False

    @pytest.fixture
    def make_model(self) -> MakeModel:
        def make(scenario: str) -> ChatModelBase:
            return ScriptedModel([_scripted_reply(t) for t in SCENARIOS[scenario]])

        return make


# ----------------------------------------------------------------- fakes of the HTTP APIs


class TestOpenAIContract(AdapterContract):
    speaks_http = True

    @pytest.fixture
    def make_model(self) -> MakeModel:
        def make(scenario: str) -> ChatModelBase:
            fake = FakeOpenAI(SCENARIOS[scenario])
            return OpenAIChatModel(
                "gpt-4o-mini", api_key=SECRET_KEY, http_client=fake.client(), retry_base_delay=0
            )

        return make


class TestAnthropicContract(AdapterContract):
    speaks_http = True

    @pytest.fixture
    def make_model(self) -> MakeModel:
        def make(scenario: str) -> ChatModelBase:
            fake = FakeAnthropic(SCENARIOS[scenario])
            return AnthropicChatModel(
                "claude-sonnet-5",
                api_key=SECRET_KEY,
                http_client=fake.client(),
                retry_base_delay=0,
            )

        return make


# ----------------------------------------------------- a real llama.cpp server on loopback


@pytest.mark.slow
class TestLlamaServerContract(AdapterContract):
    """OpenAIChatModel against llama.cpp's OpenAI-compatible server and SmolLM2-135M."""

    scripted = False
    supports_parallel_tool_calls = False  # chatml-function-calling emits one call per turn
    streams_usage = False  # llama-cpp-python ignores stream_options.include_usage
    error_kinds: ClassVar[frozenset[str]] = frozenset({"context_window", "connection"})
    can_cut_streams = False

    @pytest.fixture
    def make_model(self, llama_server: str) -> MakeModel:
        def make(scenario: str) -> ChatModelBase:
            url = llama_server
            if scenario == "connection":
                url = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
            return OpenAIChatModel(
                "smollm2",
                base_url=url,
                context_size=LLAMA_CONTEXT,
                max_tokens=24,
                temperature=0.0,
                seed=7,
            )

        return make

    def error_messages(self, kind: str) -> list[Msg]:
        if kind == "context_window":
            return user("hello world " * LLAMA_CONTEXT)
        return super().error_messages(kind)


# ------------------------------------------------------------- the embedded model in-process


@pytest.fixture(scope="module")
def local_model() -> ChatModelBase:
    pytest.importorskip("cyllama", reason="needs contextfold[local]")
    from contextfold.model._local import LocalChatModel

    return LocalChatModel(context_size=LLAMA_CONTEXT, max_tokens=24, temperature=0.0)


@pytest.mark.slow
class TestLocalChatModelContract(AdapterContract):
    """LocalChatModel (llama.cpp in-process); one instance, weights loaded once."""

    scripted = False
    supports_parallel_tool_calls = False
    error_kinds: ClassVar[frozenset[str]] = frozenset({"context_window"})
    can_cut_streams = False

    @pytest.fixture
    def make_model(self, local_model: ChatModelBase) -> MakeModel:
        def make(scenario: str) -> ChatModelBase:
            local_model.max_retries = 2
            return local_model

        return make

    def error_messages(self, kind: str) -> list[Msg]:
        if kind == "context_window":
            return user("hello world " * LLAMA_CONTEXT)
        return super().error_messages(kind)
