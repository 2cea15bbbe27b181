"""ContextConfig: the spec's fields, defaults and validation."""

from __future__ import annotations

import pytest

from contextfold.context import DEFAULT_SUMMARY_TEMPLATE, ContextConfig, SummarySchema


def test_spec_defaults() -> None:
    config = ContextConfig()
    assert config.max_image_num == 5
    assert config.context_buffer_ratio == 0.2
    assert config.compression_tool_enabled is False
    assert config.compression_fallback_to_truncation is True
    assert config.summary_template == DEFAULT_SUMMARY_TEMPLATE
    assert set(config.summary_schema["properties"]) == set(SummarySchema.model_fields)
    assert "{current_time}" in config.compression_prompt


def test_trigger_ratio_above_point_nine_names_the_field() -> None:
    with pytest.raises(ValueError, match="trigger_ratio"):
        ContextConfig(trigger_ratio=0.95)


def test_negative_image_limit_names_the_field() -> None:
    with pytest.raises(ValueError, match="max_image_num"):
        ContextConfig(max_image_num=-1)


def test_buffer_not_below_trigger_raises_value_error() -> None:
    config = ContextConfig(trigger_ratio=0.5, reserve_ratio=0.1, context_buffer_ratio=0.5)
    with pytest.raises(ValueError, match="context_buffer_ratio"):
        config.check_buffer()


def test_hint_ratio_is_trigger_minus_buffer() -> None:
    assert ContextConfig(trigger_ratio=0.8, context_buffer_ratio=0.2).hint_ratio == pytest.approx(
        0.6
    )
