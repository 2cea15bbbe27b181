"""The matching threads: where regex, glob and search work runs, off the event loop.

A process runs many sessions on one event loop, so a hostile pattern must neither hang
nor stall the others. Its work therefore

- runs in a small pool of threads of its own (:func:`off_loop`), never on the loop and
  never in the default executor, whose threads the workspaces' file and database calls
  need;
- starts at its caller's priority and is set to the lowest (nice 19) only once it has run
  ``PATTERN_GRACE_S``: a hostile pattern then burns only what the loop leaves, while an
  ordinary one, a millisecond per item, is not starved on a busy machine (from its first
  instant at nice 19, a grep of 600 small items beside four busy processes reached its
  2 s limit and told the model to simplify an ordinary pattern);
- answers its caller at the deadline in wall time: ``regex`` counts its ``timeout`` in CPU
  time, which a nice-19 thread on a busy machine gets little of (a 0.2 s limit came back
  after 18-28 s beside four busy processes on two cores). The caller leaves then; the
  thread runs on to its own limit and gives its place up (``_Call``), so the next calls
  are not queued behind it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

from .. import _process

__all__ = ["MATCH_THREADS", "MAX_OVERDUE_THREADS", "PATTERN_GRACE_S", "Deadline", "off_loop"]

_T = TypeVar("_T")

MATCH_THREADS = 2
"""Calls that run regex, glob and search work at once in the whole process; more hostile
calls than this wait for a place (their deadline runs meanwhile), ordinary storage never
does."""

MAX_OVERDUE_THREADS = 6
"""Threads still matching for a caller that has left at its deadline (they stop at their
CPU-time limit); past this many, new calls wait for one of them to end."""

PATTERN_GRACE_S = 0.1
"""Seconds a pattern's call matches at its caller's priority before its thread is set to
the lowest. Ordinary patterns finish well within it (a grep of one item of a few hundred
lines takes about a millisecond); only a long or hostile one is set back."""


class _Pool:
    """Threads that run calls at the priority of the thread that submits them (threads
    are started by :meth:`submit`, and a new thread has its creator's nice value on
    Linux). A call may set its thread to the lowest priority (``_Lowered``), which cannot
    be undone without privileges: that thread then ends as soon as an idle thread is there
    for each waiting call (at once when none waits), and a later call gets a new thread. At
    most ``size`` threads, as a ``ThreadPoolExecutor``."""

    def __init__(self, size: int, name: str) -> None:
        self._size = size
        self._name = name
        self._ready = threading.Condition()
        self._jobs: deque[Callable[[], bool]] = deque()
        self._threads = 0
        self._idle = 0
        self._started = 0

    def submit(self, job: Callable[[], bool]) -> None:
        """Run ``job`` in a thread; it returns whether it lowered its thread."""
        with self._ready:
            self._jobs.append(job)
            if len(self._jobs) > self._idle and self._threads < self._size:
                self._threads += 1
                self._started += 1
                name = f"{self._name}-{self._started}"
                threading.Thread(target=self._work, name=name, daemon=True).start()
            else:
                self._ready.notify()

    def _work(self) -> None:
        lowered = False
        while True:
            with self._ready:
                if lowered and len(self._jobs) <= self._idle:
                    self._threads -= 1  # threads at the caller's priority take what waits
                    return
                while not self._jobs:
                    self._idle += 1
                    self._ready.wait()
                    self._idle -= 1
                job = self._jobs.popleft()
            lowered = job() or lowered


class _Threads:
    """The matching threads of one process and the places they run calls in: at most
    ``MATCH_THREADS`` calls match for a waiting caller; the other threads are for calls
    whose callers have left (``_Call``). Two pools share the places: ``patterns`` for the
    patterns the model wrote (a regular expression or glob can be exponential: past
    ``PATTERN_GRACE_S`` it burns only what the loop leaves), ``bounded`` for work such as
    a search, at the caller's priority throughout (a nice-19 thread on a busy machine gets
    under 1% of a core: a search needing 20 ms of CPU reached its 5 s deadline)."""

    def __init__(self) -> None:
        self.places = threading.BoundedSemaphore(MATCH_THREADS)
        self.patterns = _Pool(MATCH_THREADS + MAX_OVERDUE_THREADS, "contextfold-match")
        self.bounded = _Pool(MATCH_THREADS + MAX_OVERDUE_THREADS, "contextfold-search")
        self.watch = _Watch()


_threads: _Threads | None = None
_threads_lock = threading.Lock()


def _lowest(thread_id: int) -> None:
    """Set a thread to the lowest priority: on Linux a thread has a nice value of its own,
    so a hostile pattern burns only what the event loop leaves."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, thread_id, 19)


class _Lowered:
    """Sets the thread running a call to the lowest priority once the call has run
    ``PATTERN_GRACE_S`` (by the ``_Watch``: the call itself is inside the matcher)."""

    def __init__(self, watch: _Watch) -> None:
        self._watch = watch
        self._lock = threading.Lock()
        self._thread_id: int | None = None
        self.ended = False
        self.lowered = False

    def begin(self) -> None:
        with self._lock:
            self._thread_id = threading.get_native_id()
        self._watch.add(self)

    def end(self) -> bool:
        """Whether the call's thread was lowered (it must not run another call)."""
        with self._lock:
            self.ended = True
            return self.lowered

    def lower(self) -> None:
        with self._lock:
            if self.ended or self._thread_id is None:
                return
            _lowest(self._thread_id)
            self.lowered = True


class _Watch:
    """One thread that lowers the calls still running when their grace ends. Every call
    gets the same grace, so they come due in the order they began."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._calls: deque[tuple[float, _Lowered]] = deque()
        watch = threading.Thread(target=self._run, name="contextfold-match-watch", daemon=True)
        watch.start()

    def add(self, call: _Lowered) -> None:
        with self._ready:
            self._calls.append((time.monotonic() + PATTERN_GRACE_S, call))
            if len(self._calls) == 1:
                self._ready.notify()

    def _run(self) -> None:
        while True:
            with self._ready:
                while not self._calls:
                    self._ready.wait()
                due, call = self._calls[0]
                if not call.ended:
                    left = due - time.monotonic()
                    if left > 0:
                        self._ready.wait(left)
                        continue
                self._calls.popleft()
            call.lower()


def _the_threads() -> _Threads:
    global _threads
    with _threads_lock:
        if _threads is None:
            _threads = _Threads()
        return _threads


def _forget_threads() -> None:
    """In a forked child: the parent's threads are not there; it starts its own."""
    global _threads, _threads_lock
    _threads, _threads_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_threads)


class _Left(Exception):
    """The caller left before its call got a place: the work is not done."""


class _Call:
    """One call's hold on a matching place, given back once: when its work ends, or when
    its caller leaves (its deadline passed, or it was cancelled) while the work runs on."""

    def __init__(self, places: threading.BoundedSemaphore) -> None:
        self._places = places
        self._lock = threading.Lock()
        self._held = False
        self._over = False

    def run(
        self,
        deadline: Deadline | None,
        fn: Callable[..., _T],
        args: Any,
        lowered: _Lowered | None = None,
    ) -> _T:
        """In a matching thread: wait for a place, then ``fn(*args)`` (``lowered`` is
        watched from when it starts)."""
        # None waits as long as it takes (a semaphore's timeout of -1 is no wait at all).
        wait = None if deadline is None else max(deadline.left(), 0.0)
        if not self._places.acquire(timeout=wait):
            raise _Left
        with self._lock:
            if self._over:
                self._places.release()
                raise _Left
            self._held = True
        if lowered is not None:
            lowered.begin()
        try:
            return fn(*args)
        finally:
            self.leave()

    def leave(self) -> None:
        with self._lock:
            if self._over:
                return
            self._over = True
            if self._held:
                self._places.release()


async def off_loop(
    fn: Callable[..., _T],
    *args: Any,
    deadline: Deadline | None = None,
    lowest_priority: bool = True,
) -> _T:
    """Run ``fn(*args)`` in the matching threads, at the caller's priority: for a pattern
    the model wrote, set to the lowest once it has run ``PATTERN_GRACE_S``; bounded work
    (``lowest_priority=False``) keeps the caller's throughout. Cancelling the caller does
    not stop the thread: the work stops at its own deadline. With
    ``deadline``, the caller gets ``deadline``'s ``TimeoutError`` when it passes, whether
    or not the thread has noticed (see the module). Worker processes that ``fn`` may need
    are started at this thread's priority, not the matching threads'
    (``_process.prepare``)."""
    _process.prepare()
    threads = _the_threads()
    call = _Call(threads.places)
    loop = asyncio.get_running_loop()
    future: asyncio.Future[_T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def job() -> bool:
        if future.cancelled():  # the caller left before a thread was free
            return False
        lowered = _Lowered(threads.watch) if lowest_priority else None
        try:
            result = call.run(deadline, fn, args, lowered)
        except BaseException as exc:  # handed to the caller, as an executor would
            error = exc
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(settle, lambda: future.set_exception(error))
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, lambda: future.set_result(result))
        return lowered is not None and lowered.end()

    (threads.patterns if lowest_priority else threads.bounded).submit(job)
    try:
        if deadline is None:
            return await future
        try:
            return await asyncio.wait_for(future, deadline.left())
        except TimeoutError:
            if future.done() and not future.cancelled():
                raise  # the work's own TimeoutError: it noticed first
            raise deadline.expired() from None
    finally:
        future.cancel()  # not started yet: it never will be
        call.leave()


class Deadline:
    """A point in time shared by the steps of one call; ``left()`` raises past it."""

    def __init__(self, seconds: float, advice: str) -> None:
        self.seconds = seconds
        self._at = time.monotonic() + seconds
        self._advice = advice

    def left(self) -> float:
        """Seconds left; ``TimeoutError`` when there are none."""
        left = self._at - time.monotonic()
        if left <= 0:
            raise self.expired()
        return left

    def expired(self) -> TimeoutError:
        return TimeoutError(self._advice.format(seconds=f"{self.seconds:g}"))
