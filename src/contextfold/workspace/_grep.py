"""Regex and glob matching over stored text with a deadline, off the event loop.

A process runs many sessions on one event loop, so a hostile pattern must neither hang
nor stall the others. Matching therefore

- runs in a small thread pool of its own (:func:`off_loop`), never on the loop and never
  in the default executor, whose threads the workspaces' file and database calls need;
- starts at its caller's priority and is set to the lowest (nice 19) only once it has run
  ``PATTERN_GRACE_S``: a hostile pattern then burns only what the loop leaves, while an
  ordinary one, a millisecond per item, is not starved on a busy machine (from its first
  instant at nice 19, a grep of 600 small items beside four busy processes reached its
  2 s limit and told the model to simplify an ordinary pattern);
- stops at its deadline inside the matcher: the ``regex`` engine checks the time while it
  backtracks (``timeout=``), so the thread really stops (a thread cannot be killed);
- answers its caller at the deadline in wall time all the same: ``regex`` counts its
  ``timeout`` in CPU time, which a nice-19 thread on a busy machine gets little of (a
  0.2 s limit came back after 18-28 s beside four busy processes on two cores). The
  caller leaves then; the thread runs on to its own limit and gives its place up
  (``_Call``), so the next calls are not queued behind it;
- is bounded before it starts: ``regex`` expands counted repeats when it compiles, so
  ``a{99999999}`` would allocate gigabytes before any deadline applies. A pattern is
  refused when it is longer than ``MAX_PATTERN_LENGTH`` or when its repeats expand to more
  than ``MAX_REPEAT_EXPANSION`` items (see ``check_pattern_size``).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

import regex

from .. import _process
from ._types import GrepMatch

__all__ = [
    "MATCH_THREADS",
    "MAX_OVERDUE_THREADS",
    "MAX_PATTERN_LENGTH",
    "MAX_REPEAT_EXPANSION",
    "Deadline",
    "Searcher",
    "check_pattern_size",
    "match_glob",
    "off_loop",
]

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

GREP_TIMEOUT = (
    "the pattern did not finish within {seconds}s; "
    "use a simpler regular expression or a narrower glob"
)
GLOB_TIMEOUT = "the glob pattern did not finish within {seconds}s; use fewer '*' and '**' wildcards"


class _Pool:
    """Threads that run calls at the priority of the thread that submits them (threads
    are started by :meth:`submit`, and a new thread has its creator's nice value on
    Linux). A call may set its thread to the lowest priority (``_Lowered``), which cannot
    be undone without privileges: that thread then ends as soon as another thread is free
    for the waiting calls, or when there are none, and a later call gets a new thread. At
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
                if lowered and (not self._jobs or self._idle):
                    self._threads -= 1  # a thread at its caller's priority takes over
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
        return TimeoutError(f"{self._advice.format(seconds=f'{self.seconds:g}')}")


def _match_paths(
    matcher: regex.Pattern[str], paths: Sequence[str], deadline: Deadline
) -> list[bool]:
    out: list[bool] = []
    for path in paths:
        try:
            out.append(matcher.fullmatch(path, timeout=deadline.left()) is not None)
        except TimeoutError:
            raise deadline.expired() from None
    return out


async def match_glob(
    matcher: regex.Pattern[str], paths: Sequence[str], *, time_limit: float
) -> list[bool]:
    """Whether each path fully matches a compiled glob (``glob_to_regex``), matched off
    the event loop; ``TimeoutError`` past ``time_limit`` seconds in all."""
    deadline = Deadline(time_limit, GLOB_TIMEOUT)
    return await off_loop(_match_paths, matcher, list(paths), deadline, deadline=deadline)


MAX_PATTERN_LENGTH = 1_000
"""Longest pattern, in characters, that ``grep`` compiles."""

MAX_REPEAT_EXPANSION = 10_000
"""Most items a pattern may expand to: every atom counts 1, ``x{m,n}`` counts ``n`` copies
of ``x`` (``x{m,}`` counts ``m``; ``*``, ``+`` and ``?`` count 1), nested repeats multiply
and the parts of a sequence or alternation add up. ``a{10000}`` is the largest single
repeat; compiling it takes a few MB."""

try:  # the stdlib's own regex parser: private, so its absence only loses precision
    _sre_parser: Any = importlib.import_module("re._parser")
    _sre_constants: Any = importlib.import_module("re._constants")
except ImportError:  # pragma: no cover - a Python that moved its parser
    _sre_parser = _sre_constants = None

_DIGITS = frozenset("0123456789")
_REPEAT_OPS = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")


def check_pattern_size(pattern: str) -> None:
    """Raise ``ValueError`` when compiling ``pattern`` could take too much memory.

    The expansion is measured on the stdlib parser's tree. Where that parser reads the
    pattern differently from ``regex`` (``regex``-only syntax, or verbose mode, in which
    ``regex`` skips blanks and comments inside ``{m,n}``), a coarser bound is used: the
    pattern length times the product of every count-like ``{m,n}`` in the text.
    """
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise ValueError(
            f"the regular expression is {len(pattern):,} characters long, over the limit of "
            f"{MAX_PATTERN_LENGTH:,}; search for a shorter, more specific pattern"
        )
    size = _tree_expansion(pattern)
    if size is None:
        size = _textual_expansion(pattern)
    if size > MAX_REPEAT_EXPANSION:
        raise ValueError(
            f"the regular expression {pattern[:80]!r} repeats too much: its counted repeats "
            f"({{m,n}}) expand to more than {MAX_REPEAT_EXPANSION:,} items; use smaller "
            "counts, or '+' / '*' instead of large {m,n}"
        )


def _tree_expansion(pattern: str) -> int | None:
    """The expansion per the stdlib parser, or ``None`` when it cannot be trusted."""
    if _sre_parser is None:
        return None
    try:
        tree = _sre_parser.parse(pattern)
    except Exception:  # re.error, OverflowError, RecursionError: regex-only syntax or odd
        return None
    if tree.state.flags & _sre_constants.SRE_FLAG_VERBOSE:
        return None
    try:
        return _weigh(tree)
    except _VerboseScope:
        return None
    except RecursionError:  # pragma: no cover - the parser recursed deeper than we do
        return None


class _VerboseScope(Exception):
    """A ``(?x:...)`` group: the stdlib reads counts there differently from ``regex``."""


def _weigh(seq: Any) -> int:
    """Items ``seq`` (a parsed ``SubPattern``) expands to, saturating past the limit."""
    total = 0
    for op, av in seq:
        if any(op is _sre_constants.__dict__.get(name) for name in _REPEAT_OPS):
            low, high, body = av
            copies = _copies(low, None if high == _sre_constants.MAXREPEAT else high)
            total += copies * _weigh(body)
        else:
            if op is _sre_constants.SUBPATTERN and av[1] & _sre_constants.SRE_FLAG_VERBOSE:
                raise _VerboseScope
            # Any other node: itself plus whatever subpatterns it holds (groups,
            # lookarounds, alternatives, conditionals), found generically so a new
            # node kind cannot hide a repeat.
            total += 1 + sum(_weigh(sub) for sub in _subpatterns(av))
        total = min(total, MAX_REPEAT_EXPANSION + 1)
    return total


def _subpatterns(av: Any) -> list[Any]:
    found: list[Any] = []
    if isinstance(av, _sre_parser.SubPattern):
        found.append(av)
    elif isinstance(av, (tuple, list)):
        for item in av:
            found.extend(_subpatterns(item))
    return found


def _copies(low: int, high: int | None) -> int:
    """How many copies of its body a repeat makes ``regex`` allocate, at least 1."""
    return max(1, min(high if high is not None else low, MAX_REPEAT_EXPANSION + 1))


def _textual_expansion(pattern: str) -> int:
    """An upper bound read off the text: every character may sit inside every count.

    Counts are found the way ``regex`` reads them, blanks and ``#`` comments skipped, so
    ``(?x)a{1 0}`` counts 10; a brace that is really a literal only makes the bound larger.
    """
    limit = MAX_REPEAT_EXPANSION + 1
    product = len(pattern)
    for start, ch in enumerate(pattern):
        if ch == "{":
            product = min(product * _count_at(pattern, start + 1), limit)
    return max(product, 1)


def _count_at(pattern: str, pos: int) -> int:
    """The copies a ``{m,n}`` whose body starts at ``pos`` makes, or 1 if it is none."""
    low = high = ""
    comma = False
    while pos < len(pattern):
        ch = pattern[pos]
        if ch.isspace():
            pos += 1
        elif ch == "#":
            end = pattern.find("\n", pos)
            if end < 0:
                return 1
            pos = end + 1
        elif ch in _DIGITS:
            if comma:
                high += ch
            else:
                low += ch
            pos += 1
        elif ch == "," and not comma:
            comma = True
            pos += 1
        elif ch == "}":
            if not comma and not low:
                return 1
            return _copies(int(low or 0), int(high) if high else None)
        else:
            return 1
    return 1


class Searcher:
    """One grep run: a compiled pattern, a shared deadline and a result budget.

    The ``regex`` engine checks the deadline while matching, so a catastrophic pattern
    (``(a|aa)+$``) raises ``TimeoutError`` instead of spinning. :meth:`search` is
    synchronous: call it through :func:`off_loop`.
    """

    def __init__(self, pattern: str, *, timeout: float, max_results: int, context: int) -> None:
        check_pattern_size(pattern)
        try:
            # Not cached: a model sending many large patterns must not pin them all.
            self._pattern = regex.compile(pattern, cache_pattern=False)
        except regex.error as exc:
            raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from exc
        except RecursionError as exc:
            raise ValueError(
                f"the regular expression {pattern[:80]!r} nests groups too deeply; "
                "use fewer nested parentheses"
            ) from exc
        self.pattern = pattern
        self._screen = _screen(pattern)
        self.deadline = Deadline(timeout, GREP_TIMEOUT)
        self.context = max(0, context)
        self.remaining = max(0, max_results)
        self.matches: list[GrepMatch] = []

    def search(self, ref: str, blocks: Iterable[str], path: str | None = None) -> None:
        """Add the matching lines of one item; raise ``TimeoutError`` past the deadline.

        ``blocks`` are the item's lines, a few thousand at a time joined by newlines (see
        ``_lines.iter_blocks``), read once, in order, and no further than the last match
        needs (its context after), so a large item is never held whole. A block the pattern
        cannot match anywhere is skipped in one call of the engine instead of line by line
        (see ``_screen``).
        """
        ctx = self.context
        before: deque[str] = deque(maxlen=ctx)
        waiting: deque[tuple[int, str, tuple[str, ...], list[str]]] = deque()
        number = 0

        def flush(final: bool) -> None:
            while waiting and (final or len(waiting[0][3]) >= ctx):
                n, line, seen, after = waiting.popleft()
                self.matches.append(GrepMatch(ref, n, line, seen, tuple(after), path))

        try:
            for block in blocks:
                if self.remaining <= 0 and not waiting:
                    return
                if not waiting and self._screen is not None and self.remaining > 0:
                    try:
                        hit = self._screen.search(block, timeout=self.deadline.left())
                    except TimeoutError:
                        raise self.deadline.expired() from None
                    if hit is None:
                        number += block.count("\n") + 1
                        if ctx:
                            before.extend(block.rsplit("\n", ctx)[-ctx:])
                        continue
                for line in block.split("\n"):
                    number += 1
                    for _, _, _, after in waiting:
                        after.append(line)
                    flush(final=False)
                    if self.remaining <= 0:
                        if not waiting:
                            return
                    else:
                        try:
                            found = self._pattern.search(line, timeout=self.deadline.left())
                        except TimeoutError:
                            raise self.deadline.expired() from None
                        if found is not None:
                            waiting.append((number, line, tuple(before), []))
                            self.remaining -= 1
                            if not ctx:  # no context after: done now, not with the next line
                                flush(final=False)
                    before.append(line)
        finally:
            flush(final=True)


_SCREEN_UNSAFE = regex.compile(r"\\[AZzG]|\(\?<?[=!]|\(\?[a-zA-Z0-9]*[-^]|\(\?\(")
"""What may match a line alone but not the same line inside a block: string anchors,
lookarounds (they see past the line's end), and flags turned off inline (``(?-m)``)."""


def _screen(pattern: str) -> regex.Pattern[str] | None:
    """``pattern`` in multiline mode, to search a block of lines at once: wherever a line
    matches alone, the block matches too (``^`` and ``$`` match at the line's ends, ``\\b``
    sees the newline as it sees the line's end), so a block without a match holds no
    matching line. ``None`` for a pattern where that may not hold."""
    if _SCREEN_UNSAFE.search(pattern):
        return None
    try:
        return regex.compile(pattern, regex.MULTILINE, cache_pattern=False)
    except (regex.error, ValueError):  # pragma: no cover - compiled once already
        return None
