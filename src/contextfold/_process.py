"""Long CPU work on a large text in a process of its own, so the event loop keeps its GIL.

A worker thread frees the event loop only while it does not hold the GIL. Work in Python
or in ``re`` over a 100 MB text holds it for seconds in all, a few milliseconds at a time;
on a loaded machine the OS often stops such a thread while it holds the GIL, and the loop,
which needs the GIL to run, waits until the thread runs again (40 ms for a thread running
nothing but bytecode, at load 7 to 10 on 2 cores; 100 to 300 ms for the redaction, the
indexing and the grep of a 100 MB item). Sent here, that work runs in another
interpreter: the calling thread encodes the text a megabyte at a time, writes it to a pipe
and waits for the answer, and both the write and the wait release the GIL.

:func:`run` is synchronous: call it from a worker thread, never on the loop. The target is
a module-level function of ``contextfold`` (found again by its module and name in the
worker), called as ``target(text, *args)`` with JSON-able ``args``; it returns a ``str``
or a JSON-able value. At most :data:`MAX_WORKERS` processes are started, lazily, on the
first call, and kept for the next; a call that finds them all busy waits for one. When no
process can be started, or one dies, the target runs in the calling thread instead (the
same result, only the loop is less free) and a warning is logged once.

The worker is started as ``sys.executable -c ...``, not through ``multiprocessing``, whose
start methods either fork a process with threads (unsafe) or import the user's main
script again in the child.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import json
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future
from typing import IO, Any

from ._logging import logger

__all__ = ["MAX_WORKERS", "Data", "WorkerFailed", "calls", "prepare", "run", "run_pieces"]

MAX_WORKERS = 2
"""Worker processes at most (one per core of a small machine)."""

_SEND = 1 << 20
"""Characters of the text encoded and written per call."""
_NICE = 0
"""How much lower than the caller's the workers' CPU priority is: not lower. At nice 19
(the first choice, to give the loop's process the CPU first) a worker got about 1% of a
CPU on a loaded machine (``ps``): a 100 MB redacted offload took 242-396 s against 32-33 s,
and the loop's largest gap during that longer call was larger, not smaller. The loop is
spared by the work being in another process, not by its priority."""
_LEN = 8
_PIPE_SIZE = 1 << 20
_PACKAGE = __name__.rpartition(".")[0]

Data = str | bytes | bytearray | memoryview | Iterable[bytes] | Iterable[memoryview]
"""What a target is given: a text, or bytes whole or in pieces."""

calls: dict[str, int] = {}
"""Calls answered by a worker process, by ``module:function`` (read by tests and benchmarks:
the work ran there, not in this process)."""

_SERVE = "import sys; sys.path.insert(0, {root!r}); from {package}._process import _serve; _serve()"


class WorkerFailed(Exception):
    """A worker failed after taking part of an input that cannot be read twice (an
    iterator): the caller reads its input again and computes the result itself."""


class _WorkerError(Exception):
    """The worker could not answer (it died, or could not be started)."""


class _Failed(Exception):
    """The target raised in the worker (it will raise here too)."""


class _Worker:
    """One worker process and its two pipes."""

    def __init__(self) -> None:
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        code = _SERVE.format(root=root, package=_PACKAGE)
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            close_fds=True,
        )
        assert self.proc.stdin is not None
        assert self.proc.stdout is not None
        _widen(self.proc.stdin.fileno(), self.proc.stdout.fileno())
        self._out: IO[bytes] = self.proc.stdin
        self._in: IO[bytes] = self.proc.stdout

    def call(self, target: str, data: Data, args: tuple[Any, ...], pieces: bool = False) -> Any:
        try:
            kind = "text" if isinstance(data, str) else "bytes"
            header = json.dumps({"target": target, "args": list(args), "kind": kind}).encode()
            self._out.write(len(header).to_bytes(_LEN, "big") + header)
            for piece in _pieces(data):  # each piece framed by its length, then a 0
                self._out.write(len(piece).to_bytes(_LEN, "big"))
                self._out.write(piece)  # a pipe write releases the GIL
            self._out.write(bytes(_LEN))
            self._out.flush()
            answer = json.loads(_joined(_read(self._in, _read_len(self._in))))
            parts = _read(self._in, _read_len(self._in))
        except (OSError, ValueError) as exc:
            raise _WorkerError(str(exc)) from exc
        if not answer["ok"]:
            raise _Failed(answer["error"])
        if answer["kind"] == "bytes" and pieces:
            return parts
        if answer["kind"] == "text":
            return _joined(parts).decode("utf-8", "surrogatepass")
        if answer["kind"] == "bytes":
            return _joined(parts)
        return answer["value"]

    def close(self) -> None:
        for pipe in (self._out, self._in):
            with contextlib.suppress(OSError):
                pipe.close()
        try:
            self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _widen(*fds: int) -> None:
    """Pipes of 1 MB instead of 64 KB where the OS allows (Linux): fewer, larger writes."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        return
    if hasattr(fcntl, "F_SETPIPE_SZ"):
        for fd in fds:
            with contextlib.suppress(OSError):
                fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _PIPE_SIZE)


def _pieces(data: Data) -> Iterator[bytes | memoryview]:
    """``data`` as bytes, about a megabyte at a time (a text encoded a piece at a time)."""
    if isinstance(data, str):
        for start in range(0, len(data), _SEND):
            yield data[start : start + _SEND].encode("utf-8", "surrogatepass")
    elif isinstance(data, (bytes, bytearray, memoryview)):
        view = memoryview(data).cast("B")
        for start in range(0, len(data), _SEND):
            yield view[start : start + _SEND]
    else:
        for piece in data:
            if piece:
                yield piece


def _read_len(stream: IO[bytes]) -> int:
    return int.from_bytes(_joined(_read(stream, _LEN)), "big")


def _read(stream: IO[bytes], size: int) -> list[bytes]:
    """Exactly ``size`` bytes (``ValueError`` at end of stream), read a megabyte at a time
    (each read releases the GIL), as those parts. ``bytes``, not a ``bytearray``: CPython's
    ``bytes.join`` copies without the GIL only when every part is ``bytes`` (joining a
    100 MB ``bytearray`` into a message's line held the loop ~80 ms)."""
    parts: list[bytes] = []
    got = 0
    while got < size:
        part = stream.read(min(size - got, _SEND))
        if not part:
            raise ValueError("the worker process closed its pipe")
        parts.append(part)
        got += len(part)
    return parts


def _joined(parts: list[bytes]) -> bytes:
    return b"" if not parts else parts[0] if len(parts) == 1 else b"".join(parts)


class _Spawner:
    """Starts the worker processes, always from one thread of its own.

    A child process takes the nice value of the thread that starts it, and an
    unprivileged process cannot lower it again: a worker first needed by a matching thread
    (nice 19, ``workspace._grep``) ran at nice 19 for good. This thread is started by the
    thread that creates the pool (:func:`prepare`), at that thread's priority."""

    def __init__(self) -> None:
        self._requests: queue.SimpleQueue[Future[_Worker]] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="contextfold-spawn", daemon=True)
        self._thread.start()

    def start(self) -> _Worker:
        """A new worker, started by the spawning thread (``OSError`` if it cannot be)."""
        request: Future[_Worker] = Future()
        self._requests.put(request)
        return request.result()

    def _serve(self) -> None:
        while True:
            request = self._requests.get()
            try:
                request.set_result(_Worker())
            except Exception as exc:  # given to the caller, who decides
                request.set_exception(exc)


class _Pool:
    def __init__(self) -> None:
        self.pid = os.getpid()
        self.idle: list[_Worker] = []
        self.slots = threading.BoundedSemaphore(MAX_WORKERS)
        self.lock = threading.Lock()
        self.broken = False
        self.spawner = _Spawner()

    def take(self) -> _Worker:
        with self.lock:
            if self.idle:
                return self.idle.pop()
        return self.spawner.start()

    def give(self, worker: _Worker) -> None:
        with self.lock:
            self.idle.append(worker)

    def close(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for worker in idle:
            worker.close()


_pool: _Pool | None = None
_pool_lock = threading.Lock()


def _the_pool() -> _Pool:
    global _pool
    with _pool_lock:
        if _pool is None or _pool.pid != os.getpid():  # a forked child starts its own
            _pool = _Pool()
        return _pool


def prepare() -> None:
    """Create the pool from this thread, whose priority its workers will have (none is
    started yet). Called before work goes to threads of lower priority that may start a
    worker (``workspace._grep.off_loop``)."""
    _the_pool()


def run(target: Callable[..., Any], data: Data, *args: Any) -> Any:
    """``target(data, *args)``, computed in a worker process (see the module); in this
    thread when there is none. Synchronous.

    ``data`` is a text, bytes, or an iterable of byte pieces (a stream read a piece at a
    time: the target gets them joined, as bytes; here they are read only as they are
    sent). The target returns a text, bytes (given back as ``bytes``) or
    a JSON-able value."""
    return _run(target, data, args, pieces=False)


def run_pieces(target: Callable[..., bytes], data: Data, *args: Any) -> list[bytes]:
    """:func:`run` of a target that returns bytes, given back as the pieces of at most a
    megabyte each that were read from the worker, never joined: a 100 MB ``bytes``
    object is freed by one ``free`` that holds the GIL for 12 ms, and 40 to 120 ms on a
    loaded machine (``munmap`` of its pages), in whatever thread drops it last; pieces are
    freed one at a time (``_pieces.release``)."""
    value = _run(target, data, args, pieces=True)
    return value if isinstance(value, list) else [value]


def _run(target: Callable[..., Any], data: Data, args: tuple[Any, ...], *, pieces: bool) -> Any:
    name = f"{target.__module__}:{target.__qualname__}"
    pool = _the_pool()
    if pool.broken or not target.__module__.startswith(f"{_PACKAGE}."):
        return target(_here(data), *args)
    with pool.slots:
        try:
            worker = pool.take()
        except OSError as exc:
            pool.broken = True
            logger.warning("no worker process (%s): long work stays in this process", exc)
            return target(_here(data), *args)
        try:
            value = worker.call(name, data, args, pieces)
        except _Failed:
            pool.give(worker)
            return target(_here(data), *args)  # raises here as it did there
        except _WorkerError as exc:
            worker.close()
            logger.warning("a worker process failed (%s); computing here", exc)
            return target(_here(data), *args)
        pool.give(worker)
    with _pool_lock:
        calls[name] = calls.get(name, 0) + 1
    return value


def _here(data: Data) -> str | bytes:
    """``data`` as the target gets it in a worker (pieces joined). Pieces a failed worker
    already took cannot be read again: :class:`WorkerFailed` then."""
    if isinstance(data, (str, bytes)):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, Iterator):
        raise WorkerFailed("the worker process failed while reading its input")
    return b"".join(data)


@atexit.register
def _close_all() -> None:
    if _pool is not None and _pool.pid == os.getpid():
        _pool.close()


def _serve() -> None:
    """The worker's loop: read a request, answer it, until the parent closes the pipe."""
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print must not corrupt the answers
    with contextlib.suppress(OSError, AttributeError):
        os.nice(_NICE)
    while True:
        try:
            head = inp.read(_LEN)
        except OSError:
            return
        if len(head) < _LEN:
            return
        request = json.loads(inp.read(int.from_bytes(head, "big")))
        pieces = []
        while size := int.from_bytes(inp.read(_LEN), "big"):
            pieces.append(inp.read(size))
        joined = b"".join(pieces)
        data = joined.decode("utf-8", "surrogatepass") if request["kind"] == "text" else joined
        blob = b""
        try:
            module, _, qualname = str(request["target"]).partition(":")
            if not module.startswith(f"{_PACKAGE}."):
                raise ValueError(f"not a {_PACKAGE} function: {module}")
            fn: Any = importlib.import_module(module)
            for part in qualname.split("."):
                fn = getattr(fn, part)
            value = fn(data, *request["args"])
            if isinstance(value, str):
                blob = value.encode("utf-8", "surrogatepass")
                answer: dict[str, Any] = {"ok": True, "kind": "text"}
            elif isinstance(value, (bytes, bytearray)):
                blob = bytes(value)
                answer = {"ok": True, "kind": "bytes"}
            else:
                answer = {"ok": True, "kind": "json", "value": value}
        except Exception as exc:  # reported to the caller, who computes it again and raises
            answer = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        raw = json.dumps(answer).encode()
        out.write(len(raw).to_bytes(_LEN, "big") + raw + len(blob).to_bytes(_LEN, "big"))
        out.write(blob)
        out.flush()
