"""Cached tool specs and argument validators behave exactly like fresh ones."""

from typing import Any

import jsonschema
from hypothesis import given
from hypothesis import strategies as st

from contextfold.message import ToolCallBlock
from contextfold.tool import Toolkit, run_tool
from contextfold.tool._toolkit import _plainly_valid


class Echo:
    name = "echo"
    description = "Echo the text."

    def __init__(self) -> None:
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"],
            "additionalProperties": False,
        }

    async def __call__(self, **kwargs: Any) -> str:
        return str(kwargs)


def test_specs_are_the_same_objects_while_tools_are_unchanged() -> None:
    toolkit = Toolkit([Echo()])
    first, second = toolkit.specs(), toolkit.specs()
    assert first[0] is second[0]


def test_spec_is_rebuilt_when_a_tool_attribute_changes() -> None:
    tool = Echo()
    toolkit = Toolkit([tool])
    before = toolkit.specs()[0]
    tool.description = "Echo it back."
    after = toolkit.specs()[0]
    assert after.description == "Echo it back."
    assert before.description == "Echo the text."


async def test_validator_follows_a_schema_changed_in_place() -> None:
    tool = Echo()
    call = ToolCallBlock(id="c1", name="echo", input={"text": "hi", "loud": True})
    refused = await run_tool(tool, call)
    assert refused.is_error
    tool.parameters["additionalProperties"] = True
    accepted = await run_tool(tool, call)
    assert not accepted.is_error


_SCHEMAS = [
    {"type": "object", "properties": {"a": {"type": t}}, "required": req, "additionalProperties": e}
    for t in ("string", "integer", "number", "boolean", "null")
    for req in ([], ["a"])
    for e in (True, False)
]
_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
)


@given(
    schema=st.sampled_from(_SCHEMAS),
    arguments=st.dictionaries(st.sampled_from(["a", "b"]), _VALUES, max_size=2),
)
def test_fast_check_accepts_only_what_jsonschema_accepts(
    schema: dict[str, Any], arguments: dict[str, Any]
) -> None:
    if _plainly_valid(schema, arguments):
        assert list(jsonschema.Draft202012Validator(schema).iter_errors(arguments)) == []
