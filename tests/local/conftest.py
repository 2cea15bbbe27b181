"""Fixtures for the embedded model: loaded once per test session."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("cyllama", reason="the embedded model needs the 'local' extra")

from contextfold.model import LocalChatModel, embedded_model_path
from contextfold.model._local_runtime import default_threads
from contextfold.token._llama import LlamaTokenCounter


@pytest.fixture(scope="session")
def local_model() -> LocalChatModel:
    return LocalChatModel(max_tokens=24, context_size=2048)


@pytest.fixture(scope="session")
def counting_model() -> LocalChatModel:
    """Short answers: these tests only look at the prompt side."""
    return LocalChatModel(max_tokens=4, context_size=2048)


@pytest.fixture(scope="session")
def llama_server_format() -> Any:
    """A second llama.cpp instance using llama-cpp-python's own chat handler, as its
    server does with ``--chat_format chatml-function-calling`` (the ``server`` extra)."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python's chat handler: 'server' extra")
    from llama_cpp import Llama

    generate, read = default_threads(None)  # the CPUs this worker may use
    return Llama(
        str(embedded_model_path()),
        n_ctx=2048,
        n_threads=generate,
        n_threads_batch=read,
        chat_format="chatml-function-calling",
        verbose=False,
    )


@pytest.fixture(scope="session")
def local_counter() -> LlamaTokenCounter:
    return LlamaTokenCounter()


@pytest.fixture(scope="session")
def server_counter() -> LlamaTokenCounter:
    return LlamaTokenCounter(framing="server")
