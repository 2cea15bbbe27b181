"""ContextConfig by concern: the spec's ten fields at the top, what goes beyond the spec
grouped, the model summarizer's knobs on the summarizer, old spellings warned about."""

from __future__ import annotations

import warnings

import pytest

from contextfold.context import (
    DEFAULT_SUMMARY_UPDATE_PROMPT,
    ContextConfig,
    LayerConfig,
    MaskingConfig,
    ModelSummarizer,
)
from contextfold.model import ScriptedModel

SPEC = {
    "trigger_ratio",
    "reserve_ratio",
    "tool_result_limit",
    "max_image_num",
    "context_buffer_ratio",
    "compression_tool_enabled",
    "compression_fallback_to_truncation",
    "compression_prompt",
    "summary_template",
    "summary_schema",
}


def test_the_spec_fields_keep_their_names_and_at_most_six_more_sit_beside_them() -> None:
    fields = set(ContextConfig.model_fields)
    assert fields >= SPEC
    assert len(fields - SPEC) <= 6


def test_the_spec_defaults_are_the_specs() -> None:
    config = ContextConfig()
    assert (config.trigger_ratio, config.tool_result_limit, config.max_image_num) == (
        0.8,
        50_000,
        5,
    )
    assert (config.context_buffer_ratio, config.compression_tool_enabled) == (0.2, False)
    assert config.compression_fallback_to_truncation is True


@pytest.mark.parametrize(
    ("old", "value", "read"),
    [
        ("summary_update", "rewrite", lambda c: c.layer.update),
        ("summary_update_template", "{next_steps}", lambda c: c.layer.update_template),
        ("ledger_ratio", 0.05, lambda c: c.layer.ledger_ratio),
        ("observation_masking", True, lambda c: c.masking is not None),
        ("summary_attempts", 2, lambda c: c.summarizer_options.attempts),
        ("summary_request", "transcript", lambda c: c.summarizer_options.request),
        ("summary_update_prompt", "only new", lambda c: c.summarizer_options.update_prompt),
    ],
)
def test_an_old_spelling_warns_naming_the_new_place_and_still_works(
    old: str, value: object, read: object
) -> None:
    with pytest.warns(DeprecationWarning, match=r"use (ContextConfig\(|ModelSummarizer)"):
        config = ContextConfig(**{old: value})
    assert read(config) == value  # type: ignore[operator]
    with pytest.warns(DeprecationWarning, match="deprecated"):
        assert getattr(config, old) == value


def test_tool_policies_under_their_old_name_go_with_masking() -> None:
    with pytest.warns(DeprecationWarning, match="deprecated"):
        config = ContextConfig(observation_masking=True, tool_policies={"bash": "strip"})
    assert config.masking == MaskingConfig(tool_policies={"bash": "strip"})


def test_the_new_spellings_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = ContextConfig(
            layer=LayerConfig(update="rewrite", ledger_ratio=0.05),
            masking=MaskingConfig(tool_policies={"read": "protect"}),
        )
        ModelSummarizer(ScriptedModel(), request="transcript", attempts=2)
    assert config.layer.update == "rewrite"


def test_the_summarizer_knobs_are_checked_on_the_summarizer() -> None:
    with pytest.raises(ValueError, match="request"):
        ModelSummarizer(ScriptedModel(), request="both")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="attempts"):
        ModelSummarizer(ScriptedModel(), attempts=0)
    assert ModelSummarizer(ScriptedModel()).update_prompt == DEFAULT_SUMMARY_UPDATE_PROMPT


def test_a_bad_value_under_an_old_name_is_still_refused() -> None:
    with (
        pytest.warns(DeprecationWarning, match="deprecated"),
        pytest.raises(ValueError, match="summary_attempts"),
    ):
        ContextConfig(summary_attempts=0)
    with pytest.warns(DeprecationWarning, match="deprecated"), pytest.raises(ValueError):
        ContextConfig(summary_update="sometimes")
