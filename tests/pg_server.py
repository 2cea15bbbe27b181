"""A throwaway PostgreSQL server on a unix socket, for runs without a configured one.

Used by the ``pg_dsn`` fixture (when ``CONTEXTFOLD_TEST_PG_DSN`` is not set) and by
``benchmarks/bench_workspace.py``.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class NoPostgresError(RuntimeError):
    """The server binaries are not installed."""


def _pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


@contextmanager
def throwaway_postgres() -> Iterator[str]:
    """Start a server in a temporary directory; yield its DSN; stop and delete it."""
    bindir = _pg_bin()
    if bindir is None:
        raise NoPostgresError(
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
