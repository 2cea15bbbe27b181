"""Fixtures shared by the workspace tests: the contract module and a real PostgreSQL."""

from __future__ import annotations

import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).parent

# Registered under a unique name so it cannot clash with other areas' helper modules.
for _name, _file in (("workspace_proc", "_ws_proc.py"), ("workspace_contract", "contract.py")):
    if _name not in sys.modules:
        _spec = importlib.util.spec_from_file_location(_name, HERE / _file)
        assert _spec is not None
        assert _spec.loader is not None
        _mod = importlib.util.module_from_spec(_spec)
        sys.modules[_name] = _mod
        _spec.loader.exec_module(_mod)


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@pytest.fixture(scope="session")
def pg_dsn() -> Iterator[str]:
    """``CONTEXTFOLD_TEST_PG_DSN`` if set, else a throwaway server on a unix socket."""
    dsn = os.environ.get("CONTEXTFOLD_TEST_PG_DSN")
    if dsn:
        yield dsn
        return
    bindir = _pg_bin()
    if bindir is None:
        pytest.skip(
            "NO POSTGRESQL: set CONTEXTFOLD_TEST_PG_DSN or install the server "
            "(apt-get install postgresql) to run the PostgresWorkspace contract suite"
        )
    base = Path(tempfile.mkdtemp(prefix="contextfold-pg-"))
    data, sock = base / "data", base / "sock"
    data.mkdir()
    sock.mkdir()
    prefix: list[str] = []
    if os.geteuid() == 0:  # postgres refuses to run as root
        shutil.chown(base, "postgres")
        shutil.chown(data, "postgres")
        shutil.chown(sock, "postgres")
        os.chmod(base, 0o755)
        prefix = ["runuser", "-u", "postgres", "--"]
    run = lambda *a: subprocess.run([*prefix, *a], check=True, capture_output=True)  # noqa: E731
    run(str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
    opts = f"-k {sock} -c listen_addresses='' -p 5439 -c fsync=off -c max_connections=200"
    run(str(bindir / "pg_ctl"), "-D", str(data), "-o", opts, "-l", str(base / "log"), "-w", "start")
    try:
        yield f"postgresql://postgres@/postgres?host={sock}&port=5439"
    finally:
        subprocess.run(
            [*prefix, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
            capture_output=True,
        )
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def pg_prefix() -> str:
    """A fresh table prefix: each test gets its own empty tables."""
    return f"t{uuid.uuid4().hex[:10]}_"
