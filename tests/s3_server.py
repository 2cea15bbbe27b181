"""An S3-protocol server on loopback for the S3 tests: moto's server mode, one process.

``python -m tests.s3_server`` serves on ``127.0.0.1`` at a free port and prints the port.
Requests are handled one at a time: moto checks ``If-None-Match``/``If-Match`` and then
writes in two steps, so only serialized requests give the atomic conditional writes S3
itself guarantees (the property ``S3Workspace`` relies on). ``--ignore-conditions`` drops
those headers, to test that ``S3Workspace`` refuses such a server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from .child_process import dies_with_this_process

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "contextfold-test",
    "AWS_SECRET_ACCESS_KEY": "contextfold-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}
"""What the tests put in the environment: S3Workspace reads them the usual way."""


def _app(ignore_conditions: bool) -> Any:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()

    def serialized(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        if ignore_conditions:
            environ.pop("HTTP_IF_NONE_MATCH", None)
            environ.pop("HTTP_IF_MATCH", None)
        with lock:
            return list(app(environ, start_response))

    return serialized


def main() -> None:
    from moto.moto_server.werkzeug_app import MotoRequestHandler
    from werkzeug.serving import make_server

    server = make_server(
        "127.0.0.1",
        0,
        _app("--ignore-conditions" in sys.argv),
        threaded=True,
        request_handler=MotoRequestHandler,
    )
    print(server.server_address[1], flush=True)
    server.serve_forever()


@contextmanager
def s3_server(*, ignore_conditions: bool = False) -> Iterator[str]:
    """Start the server in a subprocess; yield its endpoint URL; stop it."""
    args = [sys.executable, "-m", "tests.s3_server"]
    if ignore_conditions:
        args.append("--ignore-conditions")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(
        dies_with_this_process(args),
        cwd=root,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert proc.stdout is not None
        port = proc.stdout.readline().strip()
        if not port.isdigit():
            raise RuntimeError(f"the S3 test server did not start (exit code {proc.poll()})")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def create_bucket(endpoint: str, bucket: str) -> None:
    """Create ``bucket`` on the server (S3Workspace expects it to exist)."""
    from aiobotocore.session import get_session

    async with get_session().create_client("s3", endpoint_url=endpoint) as client:
        await client.create_bucket(Bucket=bucket)


if __name__ == "__main__":
    main()
