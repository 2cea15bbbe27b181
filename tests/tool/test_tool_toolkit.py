import asyncio
import threading
from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from contextfold.message import DataBlock, TextBlock, ToolCallBlock, ToolResultBlock, URLSource
from contextfold.tool import FunctionTool, Toolkit


def call(name: str, **args: Any) -> ToolCallBlock:
    return ToolCallBlock(id=f"id_{name}", name=name, input=args)


def test_schema_comes_from_type_hints_and_docstring() -> None:
    def search(query: str, limit: int = 5, mode: Literal["fast", "exact"] = "fast") -> str:
        """Search the notes.

        Args:
            query: Words to look for.
            limit: Most results to return.
        """
        return ""

    tool = FunctionTool(search)
    assert tool.name == "search"
    assert tool.description == "Search the notes."
    assert tool.parameters == {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "Words to look for."},
            "limit": {"type": "integer", "default": 5, "description": "Most results to return."},
            "mode": {"enum": ["fast", "exact"], "type": "string", "default": "fast"},
        },
        "required": ["query"],
        "additionalProperties": False,
    }


def test_annotated_field_description_wins_over_docstring() -> None:
    def f(x: Annotated[int, Field(description="from field")]) -> int:
        """F.

        Args:
            x: from docstring
        """
        return x

    assert FunctionTool(f).parameters["properties"]["x"]["description"] == "from field"


def test_register_works_as_plain_call_and_decorator_with_name() -> None:
    toolkit = Toolkit()

    def a() -> str:
        return "a"

    @toolkit.register(name="bee", description="The b tool.")
    def b() -> str:
        return "b"

    assert toolkit.register(a) is a
    assert b() == "b"
    assert [(s.name, s.description) for s in toolkit.specs()] == [
        ("bee", "The b tool."),
        ("a", ""),
    ]


def test_duplicate_name_is_rejected() -> None:
    toolkit = Toolkit()

    def a() -> None: ...

    toolkit.register(a)
    with pytest.raises(ValueError, match="already registered"):
        toolkit.register(a)


async def test_async_function_result_is_returned() -> None:
    toolkit = Toolkit()

    @toolkit.register
    async def add(a: int, b: int) -> int:
        return a + b

    result = await toolkit.execute(call("add", a=2, b=3))
    assert result == ToolResultBlock(id="id_add", name="add", output="5")


async def test_sync_function_runs_off_the_event_loop_thread() -> None:
    toolkit = Toolkit()
    main = threading.get_ident()

    @toolkit.register
    def where() -> str:
        return "other" if threading.get_ident() != main else "loop"

    assert (await toolkit.execute(call("where"))).output == "other"


async def test_invalid_arguments_become_error_result() -> None:
    toolkit = Toolkit()

    @toolkit.register
    def add(a: int, b: int) -> int:
        return a + b

    result = await toolkit.execute(call("add", a="two"))
    assert result.is_error
    assert "invalid arguments for add" in result.text()
    assert "'b' is a required property" in result.text()
    assert "'two' is not of type 'integer'" in result.text()


async def test_tool_exception_becomes_error_result() -> None:
    toolkit = Toolkit()

    @toolkit.register
    def boom() -> None:
        raise RuntimeError("disk on fire")

    result = await toolkit.execute(call("boom"))
    assert result.is_error
    assert result.text() == "Error: boom failed: RuntimeError: disk on fire"


async def test_unknown_tool_becomes_error_result_listing_tools() -> None:
    toolkit = Toolkit()
    toolkit.register(lambda: "x", name="known")
    result = await toolkit.execute(call("missing"))
    assert result.is_error
    assert "no tool named 'missing'" in result.text()
    assert "known" in result.text()


async def test_malformed_json_arguments_do_not_run_the_tool() -> None:
    ran: list[bool] = []
    toolkit = Toolkit()

    @toolkit.register
    def f() -> str:
        ran.append(True)
        return "ran"

    bad = ToolCallBlock(id="c1", name="f", raw_input="{oops", input_error="Expecting value")
    result = await toolkit.execute(bad)
    assert result.is_error
    assert "not a valid JSON object" in result.text()
    assert ran == []


async def test_pydantic_model_argument_is_passed_as_model() -> None:
    class Point(BaseModel):
        x: int
        y: int

    toolkit = Toolkit()

    @toolkit.register
    def norm1(p: Point) -> int:
        assert isinstance(p, Point)
        return abs(p.x) + abs(p.y)

    result = await toolkit.execute(call("norm1", p={"x": 3, "y": -4}))
    assert result.output == "7"


async def test_return_values_are_converted_for_the_model() -> None:
    toolkit = Toolkit()
    image = DataBlock(source=URLSource(url="https://x/y.png", media_type="image/png"))
    toolkit.register(lambda: {"a": [1, 2]}, name="as_json")
    toolkit.register(lambda: [TextBlock(text="see"), image], name="as_blocks")
    toolkit.register(lambda: None, name="as_none")
    toolkit.register(
        lambda: ToolResultBlock(id="", name="", output="nope", is_error=True), name="as_result"
    )
    assert (await toolkit.execute(call("as_json"))).output == '{"a": [1, 2]}'
    assert (await toolkit.execute(call("as_blocks"))).output == [TextBlock(text="see"), image]
    assert (await toolkit.execute(call("as_none"))).output == ""
    flagged = await toolkit.execute(call("as_result"))
    assert (flagged.output, flagged.is_error, flagged.id) == ("nope", True, "id_as_result")


async def test_tool_object_is_registered_and_called() -> None:
    class Echo:
        name = "echo"
        description = "Echo text."
        parameters = {  # noqa: RUF012
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
        }

        async def __call__(self, text: str) -> str:
            await asyncio.sleep(0)
            return text.upper()

    toolkit = Toolkit([Echo()])
    assert toolkit.specs()[0].parameters["required"] == ["text"]
    assert (await toolkit.execute(call("echo", text="hi"))).output == "HI"
    assert (await toolkit.execute(call("echo"))).is_error


async def test_reassigned_func_is_run_the_way_it_is_now() -> None:
    # FunctionTool remembers whether its func is a coroutine function; reassigning func
    # must not run the new one the old way (awaiting a plain function's result, say).
    async def first(text: str) -> str:
        return f"async {text}"

    def second(text: str) -> str:
        return f"sync {text}"

    tool = FunctionTool(first)
    assert await tool(text="a") == "async a"
    tool.func = second
    assert await tool(text="b") == "sync b"
    tool.func = first
    assert await tool(text="c") == "async c"
