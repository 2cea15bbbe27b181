"""Run llama.cpp's OpenAI-compatible server on loopback with the embedded model."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from contextfold.model._local_runtime import default_threads

from .child_process import dies_with_this_process

LLAMA_CONTEXT = 4096


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=1) as response:
            return bool(json.load(response).get("data"))
    except (OSError, ValueError, urllib.error.URLError):
        return False


class ServerFailed(RuntimeError):
    """The server exited or did not answer in time; the message holds its log."""


@contextmanager
def llama_server_process(
    gguf: Path, log: Path, *, startup_timeout: float = 120, n_ctx: int = LLAMA_CONTEXT
) -> Iterator[str]:
    """Start ``python -m llama_cpp.server``; yield its base URL; stop it on exit."""
    port = free_port()
    # Threads from the CPUs this process may use (.ci/test pins a model worker to one):
    # llama-cpp-python's own default counts the machine's.
    generate, read = default_threads(None)
    # No --cache: llama-cpp-python's LlamaRAMCache (restore a saved prompt state) cut the
    # prompt tokens the LangChain loop test evaluates only from 7,545 to 6,803; one of its
    # four cold prompts found a saved prefix, and each completion copies ~45 MB of state.
    command = [
        sys.executable, "-m", "llama_cpp.server",
        "--model", str(gguf),
        "--chat_format", "chatml-function-calling",
        "--host", "127.0.0.1",
        "--port", str(port),
        "--n_ctx", str(n_ctx),
        "--n_threads", str(generate),
        "--n_threads_batch", str(read),
        # Flash attention: a 1,429-token prompt in 15.2-18.0 s instead of 21.7-24.4 s on
        # one CPU (load 3.5); the attention over the whole context is much of a 135M
        # model's work.
        "--flash_attn", "True",
        "--verbose", "False",
    ]  # fmt: skip
    url = f"http://127.0.0.1:{port}/v1"
    with log.open("wb") as out:
        process = subprocess.Popen(
            dies_with_this_process(command),
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "NO_PROXY": "*"},
        )
    try:
        deadline = time.monotonic() + startup_timeout
        while not _ready(url):
            if process.poll() is not None:
                raise ServerFailed(
                    f"llama.cpp server exited ({process.returncode}):\n{log.read_text()}"
                )
            if time.monotonic() > deadline:
                raise ServerFailed(f"llama.cpp server did not start in time:\n{log.read_text()}")
            time.sleep(0.2)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def embedded_server(
    tmp: pytest.TempPathFactory, name: str, *, n_ctx: int = LLAMA_CONTEXT
) -> Iterator[str]:
    """A fixture's body: llama.cpp's server with the embedded model, its log under a
    ``name`` directory of ``tmp``; the test skipped without the ``server`` extra and
    failed, with the log, when the server does not start."""
    pytest.importorskip("llama_cpp.server", reason="needs contextfold[server]")
    from contextfold.model import embedded_model_path

    log = tmp.mktemp(name) / "server.log"
    try:
        with llama_server_process(embedded_model_path(), log, n_ctx=n_ctx) as url:
            yield url
    except ServerFailed as exc:
        pytest.fail(str(exc))
