"""Read-back tools: how the agent finds what was offloaded (``Read``, ``Grep``, ``Glob``,
and ``Search`` over readers that rank).

They work over any :class:`~contextfold.workspace.WorkspaceReader`, accept exactly the
references the offloader put in summaries and truncation markers (and the canonical
relative form ``sessions/<session>/...``), and never reach outside the workspace: the
reader refuses anything else with ``UnsafePathError``, which the tools report as text.
What they print is the canonical relative form, never a host path: the model copies it
into ``Read`` as shown.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Awaitable, Callable

from .._exceptions import WorkspaceError
from ..workspace import (
    GrepMatch,
    ItemInfo,
    SearchHit,
    WorkspaceGlob,
    WorkspaceReader,
    WorkspaceSearch,
    glob_to_regex,
    match_glob,
)

__all__ = ["readback_tools"]

_MAX_LINE = 2000
_MAX_GLOB = 200
"""Items ``Glob`` lists by default: 114,000 sessions made a listing of megabytes."""


def readback_tools(
    reader: WorkspaceReader,
    *,
    session_id: str | None = None,
    grep_timeout: float = 5.0,
    max_line_chars: int = _MAX_LINE,
    max_chars: int | None = None,
) -> list[Callable[..., Awaitable[str]]]:
    """``Read``, ``Grep`` and ``Glob`` over ``reader`` (and ``Search`` when it is also a
    :class:`~contextfold.workspace.WorkspaceSearch`), as plain async functions.

    With ``session_id`` the tools see only that session's items (and the data files it
    references); otherwise the whole workspace. Errors come back as text starting with
    ``Error:`` so the model can correct itself. ``grep_timeout`` bounds every grep, glob
    and search, which run off the event loop, so a catastrophic pattern neither hangs the agent
    nor stalls the other sessions of the process. With ``max_chars``, ``Read`` returns fewer
    lines than asked when they would exceed it (at least one line), and says which offset
    to continue from; the agent sets it from ``tool_result_limit`` so reads usually fit.
    """
    if max_chars is not None and max_chars < 1:
        raise ValueError(f"max_chars must be at least 1 (or None for no cap), got {max_chars}")

    def clip(line: str) -> str:
        if len(line) <= max_line_chars:
            return line
        return f"{line[:max_line_chars]}… [line cut, {len(line)} chars in all]"

    async def visible() -> list[ItemInfo]:
        return await reader.list_items(session_id)

    async def find(path: str) -> ItemInfo | None:
        for item in await visible():
            if path in (item.ref, item.path):
                return item
        return None

    async def Read(path: str, offset: int = 0, limit: int = 200) -> str:
        """Read an offloaded item: compressed context, a truncated tool result, or data.

        Output lines are numbered from 1, like ``cat -n``.

        Args:
            path: The reference from a summary or truncation marker, or a path listed
                by Glob (e.g. ``sessions/<session>/tool_result-<id>.txt``).
            offset: Number of lines to skip from the start.
            limit: Maximum number of lines to return.
        """
        if offset < 0 or limit < 1:
            return "Error: offset must be >= 0 and limit >= 1"
        try:
            if session_id is not None and await find(path) is None:
                return f"Error: {path!r} is not an offloaded item of this session; use Glob"
            lines = (await reader.read(path, offset=offset, limit=limit + 1)).split("\n")
        except WorkspaceError as exc:
            return f"Error: {exc}"
        if lines == [""]:
            return f"(no lines at offset {offset}; the item is shorter)"
        more = len(lines) > limit
        out: list[str] = []
        size = 0
        for i, line in enumerate(lines[:limit]):
            row = f"{offset + i + 1:>6}\t{clip(line)}"
            size += len(row) + 1
            if out and max_chars is not None and size > max_chars:
                more = True
                break
            out.append(row)
        if more:
            nxt = offset + len(out)
            out.append(f"(more lines follow; call Read with offset={nxt} to continue)")
        return "\n".join(out)

    async def Grep(
        pattern: str,
        path: str | None = None,
        glob: str | None = None,
        context: int = 0,
        max_results: int = 100,
    ) -> str:
        """Search offloaded content with a regular expression, line by line.

        Results are ``path:line:text`` for matches and ``path-line-text`` for context
        lines; pass the path and line to Read for more.

        Args:
            pattern: Regular expression (Python syntax) to search for.
            path: Search only this item (a reference or a path listed by Glob).
            glob: Search only items whose path matches this glob, e.g. ``*.txt``.
            context: Lines of context to show before and after each match.
            max_results: Maximum number of matching lines to return.
        """
        try:
            if path is not None:
                item = await find(path)
                if item is None:
                    return f"Error: {path!r} is not an offloaded item; use Glob to list them"
                glob = item.path
            matches = await reader.grep(
                pattern,
                session_id=session_id,
                glob=glob,
                context=max(0, context),
                max_results=max(1, max_results),
                time_limit=grep_timeout,
            )
        except (WorkspaceError, ValueError, TimeoutError) as exc:
            return f"Error: {exc}"
        if not matches:
            return "No matches."
        shown: dict[str, str] = {}
        if any(m.path is None for m in matches):  # a reader that does not say
            shown = {i.ref: i.path for i in await visible()}
        text = _format_matches(matches, clip, shown)
        if len(matches) >= max_results:
            text += f"\n(stopped at max_results={max_results}; narrow the pattern or glob)"
        return text

    async def Glob(pattern: str = "**", max_results: int = _MAX_GLOB) -> str:
        """List offloaded items (context logs, tool results, data files) with sizes.

        Args:
            pattern: Glob over item paths; ``**`` spans directories, a pattern without
                ``/`` matches file names (``*.txt``).
            max_results: Maximum number of items to list.
        """
        cap = max(1, max_results)
        note = None
        try:
            if isinstance(reader, WorkspaceGlob):  # stops at the cap: lists no more
                page = await reader.glob_items(
                    pattern, session_id=session_id, max_results=cap, time_limit=grep_timeout
                )
                shown = list(page.items)
                if page.more:
                    note = f"{len(shown)} items shown, more match"
            else:
                matcher = glob_to_regex(pattern)
                items = await visible()
                keep = await match_glob(matcher, [i.path for i in items], time_limit=grep_timeout)
                found = [info for info, k in zip(items, keep, strict=True) if k]
                shown = found[:cap]
                if len(found) > cap:
                    note = f"{cap} of {len(found)} items shown, {len(found) - cap} more"
        except (WorkspaceError, ValueError, TimeoutError) as exc:
            return f"Error: {exc}"
        if not shown:
            return f"No offloaded items match {pattern!r}."
        rows = [f"{i.path}\t{i.kind}\t{i.size} bytes" for i in shown]
        if note is not None:
            rows.append(
                f"({note}; narrow the pattern, e.g. Glob('sessions/<session>/*'), or pass "
                "max_results)"
            )
        return "\n".join(rows)

    async def Search(query: str, limit: int = 5, session: str | None = None) -> str:
        """Rank offloaded messages and tool results by a few words you remember.

        For when you recall roughly what you saw, not its exact text; names and paths
        also match by their parts. Each hit shows the Read call that opens it.

        Args:
            query: A few distinctive words, names or paths.
            limit: Maximum number of hits.
            session: Only this session's items.
        """
        if not isinstance(reader, WorkspaceSearch):
            return "Error: this workspace has no search index; use Grep"
        if session is not None and session_id is not None and session != session_id:
            return f"Error: session {session!r} is not this session; omit it"
        try:
            hits = await reader.search(
                query,
                session_id=session_id if session_id is not None else session,
                limit=max(1, min(limit, 50)),
                time_limit=grep_timeout,
            )
        except (WorkspaceError, ValueError, TimeoutError) as exc:
            return f"Error: {exc}"
        if not hits:
            return f"No offloaded items match {query!r}; try other words, or Grep."
        return "\n".join(_format_hit(i, hit, clip) for i, hit in enumerate(hits, 1))

    tools: list[Callable[..., Awaitable[str]]] = [Read, Grep, Glob]
    if isinstance(reader, WorkspaceSearch):
        tools.append(Search)
    return tools


def _format_hit(rank: int, hit: SearchHit, clip: Callable[[str], str]) -> str:
    where = f"{hit.path} (line {hit.offset + 1})" if hit.kind == "context" else hit.path
    read = (
        f"Read(path={hit.path!r}, offset={hit.offset}, limit=1)"
        if hit.kind == "context"
        else f"Read(path={hit.path!r})"
    )
    return f"{rank}. {where} score {hit.score:g}\n   {clip(hit.snippet)}\n   {read}"


def _format_matches(
    matches: list[GrepMatch], clip: Callable[[str], str], shown: dict[str, str]
) -> str:
    """``grep -n`` style: ``path:n:text`` for matches, ``path-n-text`` for context, ``--``
    between groups; a line shown as context of two matches appears once. ``shown`` maps a
    reference to the relative path printed (a reference it lacks is printed as is)."""
    rows: dict[tuple[str, int], tuple[bool, str]] = {}
    for m in (dataclasses.replace(m, ref=m.path or shown.get(m.ref, m.ref)) for m in matches):
        first = m.line_number - len(m.before)
        for k, line in enumerate(m.before):
            rows.setdefault((m.ref, first + k), (False, line))
        rows[(m.ref, m.line_number)] = (True, m.line)
        for k, line in enumerate(m.after):
            rows.setdefault((m.ref, m.line_number + 1 + k), (False, line))
    out: list[str] = []
    prev: tuple[str, int] | None = None
    for ref, n in sorted(rows):
        if prev is not None and (prev[0] != ref or n > prev[1] + 1):
            out.append("--")
        is_match, line = rows[(ref, n)]
        out.append(f"{ref}{':' if is_match else '-'}{n}{':' if is_match else '-'}{clip(line)}")
        prev = (ref, n)
    return "\n".join(out)
