"""The framework examples of the README and docs/integrations run as written.

Each example is executed from the page, then driven by the framework's own loop with a
scripted model: a tool returns a long output, which the engine must cut and offload.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
LONG = "\n".join(f"line {i}: a long tool output that goes on" for i in range(900))


def example(path: Path, heading: str | None = None) -> dict[str, Any]:
    """Run the first python block of ``path`` (after ``heading``) and return its names."""
    text = path.read_text()
    if heading is not None:
        text = text.split(heading, 1)[1]
    match = re.search(r"```python\n(.*?)```", text, re.DOTALL)
    assert match is not None, f"{path.name} lost its example"
    namespace: dict[str, Any] = {}
    exec(compile(match.group(1), str(path), "exec"), namespace)
    return namespace


def test_the_readme_and_the_langchain_page_show_the_same_example() -> None:
    readme = (ROOT / "README.md").read_text().split("## In your framework", 1)[1]
    page = (ROOT / "docs" / "integrations" / "langchain.md").read_text()
    block = re.compile(r"```python\n(.*?)```", re.DOTALL)
    first_readme, first_page = block.search(readme), block.search(page)
    assert first_readme is not None
    assert first_page is not None
    assert first_readme.group(1) == first_page.group(1)


@pytest.mark.parametrize("page", ["README.md", "docs/integrations/langchain.md"])
async def test_the_langchain_example_cuts_a_long_tool_result(page: str) -> None:
    pytest.importorskip("langchain.agents", reason="needs contextfold[langchain]")
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool

    class Scripted(BaseChatModel):
        calls: int = 0

        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self

        def _generate(
            self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any
        ) -> ChatResult:
            self.calls += 1
            if self.calls == 1:
                call = {"name": "cat", "args": {"path": "log.txt"}, "id": "c1"}
                answer = AIMessage(content="", tool_calls=[call])
            else:
                answer = AIMessage(content="done")
            return ChatResult(generations=[ChatGeneration(message=answer)])

    @tool
    def cat(path: str) -> str:
        """Print a file."""
        return LONG

    names = example(ROOT / page, "## In your framework" if page == "README.md" else None)
    agent = names["make_agent"](Scripted(), [cat])
    state = await agent.ainvoke(
        {"messages": [HumanMessage("Read log.txt")]}, config={"configurable": {"thread_id": "t"}}
    )
    (result,) = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert "<<<TRUNCATED>>>" in result.text
    assert "sessions/t/tool_result-c1.txt" in result.text
    assert state["messages"][-1].text == "done"


async def test_the_pydantic_ai_example_cuts_a_long_tool_result() -> None:
    pytest.importorskip("pydantic_ai", reason="needs contextfold[pydantic-ai]")
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart, ToolReturnPart
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    seen: list[str] = []

    def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
        returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
        if not returns:
            return ModelResponse(parts=[ToolCallPart("cat", {"path": "log.txt"}, "c1")])
        seen.append(str(returns[0].content))
        return ModelResponse(parts=[TextPart("done")])

    def cat(path: str) -> str:
        """Print a file.

        Args:
            path: The file.
        """
        return LONG

    names = example(ROOT / "docs" / "integrations" / "pydantic-ai.md")
    agent = names["make_agent"](FunctionModel(respond), [cat])
    result = await agent.run("Read log.txt")
    assert result.output == "done"
    assert "<<<TRUNCATED>>>" in seen[0]
    assert "tool_result-c1.txt" in seen[0]


async def test_the_openai_agents_example_cuts_a_long_tool_result() -> None:
    pytest.importorskip("agents", reason="needs contextfold[openai-agents]")
    from agents import function_tool
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    sent: list[Any] = []

    class Scripted(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            items = kwargs["input"]
            sent.append(items)
            outputs = [i for i in items if isinstance(i, dict) and "output" in i]
            if not outputs:
                call = ResponseFunctionToolCall(
                    type="function_call", call_id="c1", name="cat", arguments='{"path": "log.txt"}'
                )
                return ModelResponse(output=[call], usage=Usage(), response_id=None)
            text = ResponseOutputText(type="output_text", text="done", annotations=[])
            message = ResponseOutputMessage(
                id="m1", type="message", role="assistant", status="completed", content=[text]
            )
            return ModelResponse(output=[message], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    def cat(path: str) -> str:
        """Print a file.

        Args:
            path: The file.
        """
        return LONG

    names = example(ROOT / "docs" / "integrations" / "openai-agents.md")
    output = await names["run"](Scripted(), [function_tool(cat)], "Read log.txt")
    assert output == "done"
    (result,) = [i for i in sent[-1] if i.get("type") == "function_call_output"]
    assert "<<<TRUNCATED>>>" in result["output"]
    assert "tool_result-c1.txt" in result["output"]


# -- the sections on session binding and readback=False ----------------------------------

SECRET = "SECRET-9917"
SECRET_LOG = "\n".join(
    f"line {i}: failure {SECRET}" if i == 450 else f"line {i}: a long tool output that goes on"
    for i in range(900)
)
OMITTED = "The remaining content has been omitted for limited context.</system-reminder>"


def _plan(last: str) -> tuple[str, dict[str, Any]] | None:
    """The scripted model's next call after the user's ``last`` words (None: answer)."""
    if last.startswith("cat"):
        return ("cat", {"path": "log.txt"})
    if last.startswith("grep"):
        return ("Grep", {"pattern": SECRET})
    return None


async def test_the_langchain_threads_example_keeps_threads_apart() -> None:
    pytest.importorskip("langchain.agents", reason="needs contextfold[langchain]")
    from langchain_core.language_models import BaseChatModel
    from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
    from langchain_core.outputs import ChatGeneration, ChatResult
    from langchain_core.tools import tool

    from contextfold.workspace import MemoryWorkspace

    bound: list[list[str]] = []

    class Scripted(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "scripted"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            bound.append([t.name for t in tools])
            return self

        def _generate(self, messages: Any, *args: Any, **kwargs: Any) -> ChatResult:
            step = _plan(messages[-1].text) if isinstance(messages[-1], HumanMessage) else None
            answer = (
                AIMessage(content="done")
                if step is None
                else AIMessage(
                    content="", tool_calls=[{"name": step[0], "args": step[1], "id": "c"}]
                )
            )
            return ChatResult(generations=[ChatGeneration(message=answer)])

    @tool
    def cat(path: str) -> str:
        """Print a file."""
        return SECRET_LOG

    page = ROOT / "docs" / "integrations" / "langchain.md"
    names = example(page, "## Threads read only their own items")
    workspace = MemoryWorkspace()
    agent = names["make_threaded_agent"](Scripted(), [cat], workspace)
    await names["ask"](agent, "t1", "cat log.txt")
    found = await names["ask"](agent, "t1", "grep it")
    missing = await names["ask"](agent, "t2", "grep it")
    assert SECRET in [m for m in found["messages"] if isinstance(m, ToolMessage)][-1].text
    assert [m for m in missing["messages"] if isinstance(m, ToolMessage)][-1].text == "No matches."

    bound.clear()
    agent = names["make_threaded_agent"](Scripted(), [cat], MemoryWorkspace(), readback=False)
    state = await names["ask"](agent, "t3", "cat log.txt")
    assert bound[0] == ["cat"]
    (result,) = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    assert result.text.endswith(OMITTED)


async def test_the_pydantic_ai_conversations_example_keeps_conversations_apart() -> None:
    pytest.importorskip("pydantic_ai", reason="needs contextfold[pydantic-ai]")
    from pydantic_ai.messages import (
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
        UserPromptPart,
    )
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    from contextfold.workspace import MemoryWorkspace

    offered: list[list[str]] = []

    def respond(messages: list[Any], info: AgentInfo) -> ModelResponse:
        offered.append([t.name for t in info.function_tools])
        last = messages[-1]
        prompt = [p for p in last.parts if isinstance(p, UserPromptPart)]
        step = _plan(str(prompt[0].content)) if isinstance(last, ModelRequest) and prompt else None
        if step is None:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart(step[0], step[1], "c")])

    def cat(path: str) -> str:
        """Print a file.

        Args:
            path: The file.
        """
        return SECRET_LOG

    def returned(result: Any) -> str:
        parts = [p for m in result.new_messages() for p in m.parts]
        return str([p for p in parts if isinstance(p, ToolReturnPart)][-1].content)

    page = ROOT / "docs" / "integrations" / "pydantic-ai.md"
    names = example(page, "## Conversations read only their own items")
    agent = names["make_shared_agent"](FunctionModel(respond), [cat], MemoryWorkspace())
    first = await names["ask"](agent, "c1", "cat log.txt")
    found = await names["ask"](agent, "c1", "grep it", first.all_messages())
    missing = await names["ask"](agent, "c2", "grep it")
    assert SECRET in returned(found)
    assert returned(missing) == "No matches."

    offered.clear()
    agent = names["make_shared_agent"](
        FunctionModel(respond), [cat], MemoryWorkspace(), readback=False
    )
    result = await names["ask"](agent, "c3", "cat log.txt")
    assert offered[0] == ["cat"]
    assert returned(result).endswith(OMITTED)


async def test_the_openai_agents_sessions_example_keeps_sessions_apart(
    monkeypatch: Any, tmp_path: Path
) -> None:
    pytest.importorskip("agents", reason="needs contextfold[openai-agents]")
    from agents import function_tool
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    from contextfold.workspace import MemoryWorkspace

    outputs: list[str] = []
    offered: list[list[str]] = []

    class Scripted(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            items, tools = kwargs["input"], kwargs["tools"]
            offered.append([t.name for t in tools])
            last = items[-1]
            if last.get("type") == "function_call_output":
                outputs.append(str(last["output"]))
            step = _plan(str(last.get("content", ""))) if last.get("role") == "user" else None
            if step is not None:
                call = ResponseFunctionToolCall(
                    type="function_call",
                    call_id=f"c{len(outputs)}",
                    name=step[0],
                    arguments=json.dumps(step[1]),
                )
                return ModelResponse(output=[call], usage=Usage(), response_id=None)
            text = ResponseOutputText(type="output_text", text="done", annotations=[])
            message = ResponseOutputMessage(
                id="m1", type="message", role="assistant", status="completed", content=[text]
            )
            return ModelResponse(output=[message], usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    def cat(path: str) -> str:
        """Print a file.

        Args:
            path: The file.
        """
        return SECRET_LOG

    monkeypatch.chdir(tmp_path)
    page = ROOT / "docs" / "integrations" / "openai-agents.md"
    run = example(page, "## One filter per session")["run_in_session"]
    workspace = MemoryWorkspace()
    tools = [function_tool(cat)]
    await run(Scripted(), tools, workspace, "s1", "cat log.txt")
    await run(Scripted(), tools, workspace, "s1", "grep it")
    await run(Scripted(), tools, workspace, "s2", "grep it")
    assert SECRET in outputs[1]
    assert outputs[2] == "No matches."

    offered.clear()
    await run(Scripted(), tools, MemoryWorkspace(), "s3", "cat log.txt", readback=False)
    assert offered[0] == ["cat"]
    assert outputs[3].endswith(OMITTED)
