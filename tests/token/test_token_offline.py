"""The OpenAI vocabularies work on a fresh machine with no network."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from contextfold.token import seed_tiktoken_cache

SRC = Path(__file__).parents[2] / "src"
# sha256 of the decompressed files, as tiktoken_ext.openai_public checks them
EXPECTED = {
    "fb374d419588a4632f3f557e76b4b70aebbca790": (
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d"
    ),
    "9b5ad71b2ce5302211f9c61530b329a4922fc6a4": (
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
    ),
}


def test_seeding_writes_the_vocabularies_tiktoken_expects(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    assert seed_tiktoken_cache() == tmp_path
    for name, sha256 in EXPECTED.items():
        assert hashlib.sha256((tmp_path / name).read_bytes()).hexdigest() == sha256


_SCRIPT = """
import socket
def refuse(*a, **k):
    raise OSError("network disabled in this test")
socket.socket.connect = refuse
socket.create_connection = refuse
from contextfold.token import OpenAITokenCounter
for enc in ("o200k_base", "cl100k_base"):
    c = OpenAITokenCounter(enc)
    print(c.count_text("hello world"), c.tail("one two three four", 2))
import sys
print("tiktoken" in sys.modules)
"""


def test_fresh_machine_counts_and_cuts_without_network(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR",)}
    env.update(HOME=str(tmp_path), XDG_CACHE_HOME=str(tmp_path / "cache"), PYTHONPATH=str(SRC))
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    # toktok counts and cuts: tiktoken's second copy of the vocabulary is never loaded
    assert done.stdout.splitlines() == ["2  three four", "2  three four", "False"]
