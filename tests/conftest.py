"""Fixtures shared by every test area."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llama_server_process import ServerFailed, llama_server_process


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL (``http://127.0.0.1:<port>/v1``) of llama.cpp serving the embedded model,
    started once per test session on loopback."""
    pytest.importorskip("llama_cpp.server", reason="needs contextfold[server]")
    from contextfold.model import embedded_model_path

    log = tmp_path_factory.mktemp("llama") / "server.log"
    try:
        with llama_server_process(embedded_model_path(), log) as url:
            yield url
    except ServerFailed as exc:
        pytest.fail(str(exc))
