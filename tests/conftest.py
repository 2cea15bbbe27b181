"""Fixtures shared by every test area: the llama.cpp server, a PostgreSQL database and an
S3-protocol server."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import pytest

from .lanes import BALANCING, MODEL_FIXTURES, outside_their_lane
from .llama_server_process import embedded_server
from .pg_server import NoPostgresError, throwaway_postgres
from .s3_server import CREDENTIALS, create_bucket, s3_server

pytest_plugins = ["pytester"]  # runs the public WorkspaceContract on a broken offloader

_SUMMARY_KEY = "contextfold_reliability_summary"


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Base URL (``http://127.0.0.1:<port>/v1``) of llama.cpp serving the embedded model,
    started once per test session on loopback."""
    yield from embedded_server(tmp_path_factory, "llama")


@pytest.fixture
def pinned_prompt_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compression prompt states the wall-clock time, and the 135M model's summary
    (so a model-backed run's course and length) changes with it: those tests pin it."""
    from contextfold.context import _plan

    monkeypatch.setattr(_plan, "current_time", lambda: "2026-12-01 12:00:00 UTC")


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """``CONTEXTFOLD_TEST_PG_DSN`` if set, else a throwaway server on a unix socket;
    skips without asyncpg or a server."""
    pytest.importorskip("asyncpg", reason="PostgreSQL needs contextfold[postgres]")
    dsn = os.environ.get("CONTEXTFOLD_TEST_PG_DSN")
    if dsn:
        yield dsn
        return
    with ExitStack() as stack:
        try:
            dsn = stack.enter_context(throwaway_postgres())
        except NoPostgresError as exc:
            pytest.skip(str(exc))
        yield dsn


@pytest.fixture
def pg_prefix() -> str:
    """A fresh table prefix: each test gets its own empty tables."""
    return f"t{uuid.uuid4().hex[:10]}_"


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """URL of an S3-protocol server (moto's server mode) on loopback, started once per test
    session, with test credentials in the environment (where S3Workspace finds them, as it
    would real ones); skips without contextfold[s3] or moto."""
    pytest.importorskip("aiobotocore", reason="S3Workspace needs contextfold[s3]")
    pytest.importorskip("moto.server", reason="the S3 test server needs moto[server]")
    saved = {k: os.environ.get(k) for k in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    try:
        with s3_server() as url:
            yield url
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="session")
def s3_bucket(s3_endpoint: str) -> str:
    """A bucket on the S3 test server, shared by the tests (each uses its own prefix)."""
    asyncio.run(create_bucket(s3_endpoint, "contextfold-test"))
    return "contextfold-test"


@pytest.fixture
def s3_prefix() -> str:
    """A fresh key prefix: each test gets its own empty part of the bucket."""
    return f"t{uuid.uuid4().hex[:10]}/"


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by marker
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test on the embedded model is ``model``: .ci/test runs those on workers of their
    own, each pinned to one CPU (``pytest_configure``), so that llama.cpp runs one thread
    there and never waits at a barrier for a thread another test descheduled (the demo,
    68 s alone, went past its 300 s timeout with two threads beside an xdist worker)."""
    for item in items:
        if MODEL_FIXTURES.intersection(getattr(item, "fixturenames", ())) or (
            item.nodeid.split("::", 1)[0] in BALANCING
        ):
            item.add_marker(pytest.mark.model)
    items.sort(key=_longest_first)
    problems = outside_their_lane(items)
    if problems:
        raise pytest.UsageError(
            f"{problems[0]}: .ci/test collects that lane only from the files that do "
            "(tests/lanes.py), so it would never run"
        )


LONGEST_FIRST = (
    "tests/cli/test_cli_demo_local.py",
    "tests/integrations/test_integrations_langchain.py",
    "tests/integrations/test_integrations_pydantic_ai.py",
    "tests/gateway/test_gateway_mini_swe_agent.py",
    "tests/integrations/test_integrations_openai_agents.py",
)
"""The model lane's longest files (190, 157, 152, 121 and 117 s in .ci/test on
2026-12-07), collected first. The lane runs with ``--no-loadscope-reorder``, so xdist
hands its two workers files in this order as they free up, longest first: with its own
order (files with the most tests first) these single-test files came last, and one
worker ran 200 s longer than the other."""


def _longest_first(item: pytest.Item) -> int:
    path = item.nodeid.split("::", 1)[0]
    return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_configure(config: pytest.Config) -> None:
    """With ``CONTEXTFOLD_TEST_PIN_WORKERS=1`` (.ci/test's model lane), pin each xdist
    worker, and so the llama.cpp servers and demo runs it starts, to one CPU of its own:
    the embedded model's runtime and the server take their thread counts from the CPUs
    the process may use."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if os.environ.get("CONTEXTFOLD_TEST_PIN_WORKERS") == "1" and worker.startswith("gw"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[int(worker[2:]) % len(cpus)]})


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On a pytest-xdist worker, hand the reliability counts to the controller, which
    prints the summary (the worker's own list dies with it)."""
    from .reliability.rel_support import SUMMARY

    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[_SUMMARY_KEY] = list(SUMMARY)


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: unknown without the plugin
def pytest_testnodedown(node: Any, error: object) -> None:
    """On pytest-xdist's controller: collect a finished worker's reliability counts."""
    from .reliability.rel_support import SUMMARY

    SUMMARY.extend(getattr(node, "workeroutput", {}).get(_SUMMARY_KEY, []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The counts the reliability tests report (rounds run, messages checked), with
    ``-n`` gathered from every worker."""
    from .reliability.rel_support import SUMMARY

    if SUMMARY:
        terminalreporter.section("reliability counts")
        for line in SUMMARY:
            terminalreporter.write_line(line)
