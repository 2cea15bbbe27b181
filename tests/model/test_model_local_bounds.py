"""``bounded_strings``: the embedded model's structured output fits its ``max_tokens``."""

from __future__ import annotations

import json

from contextfold.context import SummarySchema
from contextfold.model._local_grammar import bounded_strings


def test_every_open_string_gets_an_even_share_of_the_room() -> None:
    schema = SummarySchema.model_json_schema()
    bounded = bounded_strings(schema, 400)
    lengths = [p["maxLength"] for p in bounded["properties"].values()]
    assert len(set(lengths)) == 1
    skeleton = len(json.dumps(dict.fromkeys(schema["properties"], "")))
    assert sum(lengths) + skeleton <= 400 * 3
    assert "maxLength" not in json.dumps(schema)  # the caller's schema is not changed


def test_a_string_with_its_own_bound_and_other_types_are_left_alone() -> None:
    schema = {
        "type": "object",
        "properties": {
            "code": {"type": "string", "maxLength": 8},
            "count": {"type": "integer"},
            "note": {"type": "string"},
        },
    }
    bounded = bounded_strings(schema, 100)
    assert bounded["properties"]["code"] == {"type": "string", "maxLength": 8}
    assert bounded["properties"]["count"] == {"type": "integer"}
    assert bounded["properties"]["note"]["maxLength"] > 8


def test_a_tiny_budget_still_leaves_each_field_some_room() -> None:
    bounded = bounded_strings(SummarySchema.model_json_schema(), 4)
    assert all(p["maxLength"] == 16 for p in bounded["properties"].values())


def test_schemas_without_object_properties_are_returned_unchanged() -> None:
    for schema in ({"type": "string"}, {"type": "array", "items": {"type": "string"}}, {}):
        assert bounded_strings(schema, 100) is schema
