"""Tool specs shared by the tests that send requests to the embedded model."""

from __future__ import annotations

from contextfold.message import ToolSpec

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
SEARCH = ToolSpec(
    name="search_docs",
    description="Full-text search over the project docs",
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["query"],
    },
)
