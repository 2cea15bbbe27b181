"""``contextfold._process``: work sent to a worker process comes back as computed here,
and without a worker it is computed here."""

from __future__ import annotations

import asyncio
import os
import sys
import threading

import pytest

from contextfold import _process
from contextfold.workspace import _grep
from contextfold.workspace._pieces import json_string_body
from contextfold.workspace._terms import index_terms_text


def test_a_text_round_trips_through_a_worker_with_any_character() -> None:
    text = "ascii, ünïcödé, 🙂, a lone surrogate \udc80, NUL \x00\n" * 30_000
    before = _process.calls.get("contextfold.workspace._terms:index_terms_text", 0)
    assert _process.run(index_terms_text, text) == index_terms_text(text)
    assert _process.calls["contextfold.workspace._terms:index_terms_text"] == before + 1
    pieces = [b"abc", b"", b"def" * 1000]
    assert _process.run(len, "abc") == 3  # not a function of ours: computed here
    assert _process.run(_process._here, iter(pieces)) == b"".join(pieces)


def test_an_error_in_the_worker_is_raised_here() -> None:
    with pytest.raises(TypeError):
        _process.run(index_terms_text, b"bytes, not a text")


def test_without_a_worker_the_work_is_done_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_process, "_pool", None)
    monkeypatch.setattr(sys, "executable", "/nonexistent/python")
    text = "some words to index\n" * 10
    assert _process.run(index_terms_text, text) == index_terms_text(text)
    pool = _process._the_pool()
    assert pool.broken
    monkeypatch.setattr(_process, "_pool", None)


def test_bytes_come_back_as_bytes_which_join_without_the_gil() -> None:
    # CPython's bytes.join copies without the GIL only when every part is bytes: a
    # bytearray answer, joined into a message's line, held the loop ~80 ms for 100 MB.
    text = 'a "quoted" line\n' * 200_000
    body = _process.run(json_string_body, text)
    assert type(body) is bytes
    assert body == json_string_body(text)


def test_workers_run_at_the_callers_priority(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not below it: at nice 19 a worker got 1% of a CPU on a loaded machine, and a 100 MB
    redacted offload took 242-396 s against 32-33 s at the caller's priority
    (docs/RELIABILITY.md)."""
    monkeypatch.setattr(_process, "_pool", None)  # workers started by this test
    text = "some words to index\n" * 10
    assert _process.run(index_terms_text, text) == index_terms_text(text)
    (worker,) = _process._the_pool().idle
    try:
        assert os.getpriority(os.PRIO_PROCESS, worker.proc.pid) == os.getpriority(
            os.PRIO_PROCESS, 0
        )
    finally:
        _process._the_pool().close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values")
def test_a_worker_started_from_a_nice_thread_runs_at_the_process_priority(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A child process takes the nice value of the thread that starts it, and an
    unprivileged process cannot lower it again: a worker first needed by a matching thread
    (nice 19, ``workspace._grep``) would have run at nice 19 for good."""
    monkeypatch.setattr(_process, "_pool", None)  # workers started by this test
    process_priority = os.getpriority(os.PRIO_PROCESS, 0)
    text = "some words to index\n" * 10
    answers: list[object] = []

    def in_a_nice_thread() -> None:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        answers.append(_process.run(index_terms_text, text))

    asyncio.run(_grep.off_loop(in_a_nice_thread))  # a matching thread, as a grep runs it
    assert answers == [index_terms_text(text)]
    (worker,) = _process._the_pool().idle
    try:
        assert os.getpriority(os.PRIO_PROCESS, worker.proc.pid) == process_priority
    finally:
        _process._the_pool().close()
