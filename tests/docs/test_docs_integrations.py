"""The framework examples of the README and docs/integrations run as written.

Each example is executed from the page, then driven by the framework's own loop with a
scripted model: a tool returns a long output, which the engine must cut and offload.
"""

from __future__ import annotations

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
