"""The shipped redactor's speed on 10 MB of mixed tool output (issue 28).

Run: ``python benchmarks/bench_redact.py`` (from the repo root; ``PYTHONPATH=<tree>/src``
picks the tree, for an A/B of two commits). Prints the median of five passes over each
text, in seconds and MB/s.

The texts: a mix of what tool results hold (source code, JSON, logs, shell environments
with a credential now and then), one base64 blob (an image; one 10 MB "word" is where a
pattern that backtracks over a word's prefix goes quadratic), and one line of ten million
``a``s without a newline.
"""

from __future__ import annotations

import base64
import random
import statistics
import time

SIZE = 10_000_000

_CHUNKS = [
    "def handler(request):\n    password = request.form['password']\n    return ok(password)\n",
    '{"id": "123e4567-e89b-12d3-a456-426614174000", "sha": "3f1c2ab9e8d7c6b5a4f3e2d1c0b9a8f7"}\n',
    "2026-01-01T00:00:00Z INFO GET /api/v1/items?page=2 200 12ms user=alice\n",
    'export DB_PASSWORD="hunter2hunter2"\n',
    'declare -x PWD="/home/alice/project"\n',
    '{"SecretAccessKey": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AccessKeyId": "x"}\n',
    "db:\n  host: localhost\n  password: s3cr3t-pw\n",
    "psql 'host=db user=app password=Zq81mn0p dbname=prod'\n",
    "The password_reset_view sends a token to the user's address.\n",
]


def _mixed() -> str:
    rng = random.Random(28)
    parts: list[str] = []
    size = 0
    while size < SIZE:
        chunk = rng.choice(_CHUNKS)
        parts.append(chunk)
        size += len(chunk)
    return "".join(parts)


def _base64() -> str:
    return base64.b64encode(random.Random(1).randbytes(SIZE * 3 // 4)).decode()


def main() -> None:
    from contextfold.context import redact_credentials

    for name, text in (("mixed", _mixed()), ("base64", _base64()), ("one-word", "a" * SIZE)):
        times = []
        for _ in range(5):
            started = time.perf_counter()
            redact_credentials(text)
            times.append(time.perf_counter() - started)
        median = statistics.median(times)
        mb = len(text) / 1e6
        print(f"{name:9s} {mb:5.1f} MB  {median:6.3f} s  {mb / median:6.1f} MB/s")


if __name__ == "__main__":
    main()
