"""``contextfold inspect``: what a workspace holds, and one offloaded item.

It only looks: the workspace is opened read-only (nothing created, repaired or indexed,
so it works on a read-only mount and leaves a live workspace as it was), and stored text
is printed with its control characters escaped (see ``_terminal``) unless ``--raw``.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .._exceptions import WorkspaceError
from ..context import transcript_entry
from ..message import Msg
from ..workspace import ItemInfo, LocalWorkspace, WorkspaceReader
from ._terminal import escape_controls

__all__ = ["inspect_workspace"]

_PREVIEW = 600
"""Characters of each message shown when a context log is printed as messages."""


def _size(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _usage_error(message: str, param: str) -> typer.BadParameter:
    return typer.BadParameter(message, param_hint=param)


def inspect_workspace(
    workdir: Annotated[
        Path,
        typer.Argument(
            metavar="WORKDIR",
            help="A workspace directory: an agent's workdir or 'replay --workdir'.",
            show_default=False,
        ),
    ],
    session: Annotated[
        str | None, typer.Argument(metavar="SESSION", help="List this session's items.")
    ] = None,
    item: Annotated[
        str | None,
        typer.Option(
            "--item",
            "-i",
            help="Show one item: its reference, its path as listed, or (with SESSION) its "
            "file name.",
        ),
    ] = None,
    offset: Annotated[
        int, typer.Option("--offset", min=0, help="With --item: first line (0-based).")
    ] = 0,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="With --item: most lines.")
    ] = None,
    raw: Annotated[
        bool,
        typer.Option(
            "--raw",
            help="Print as stored: a context log as JSON lines, and control characters "
            "(escape sequences) unescaped.",
        ),
    ] = False,
) -> None:
    """List a workspace's sessions, a session's offloaded items, or show one item.

    Exit code 0 on success, 2 for a path, session or item that does not exist.
    """
    if not workdir.is_dir():
        raise _usage_error(f"{workdir}: no such directory", "'WORKDIR'")
    if not any((workdir / sub).is_dir() for sub in ("sessions", "data")):
        raise _usage_error(
            f"{workdir} is not a contextfold workspace (it has no sessions/ or data/ "
            "directory); pass the workdir an agent or 'contextfold replay --workdir' wrote to",
            "'WORKDIR'",
        )
    try:
        asyncio.run(_inspect(workdir, session, item, offset, limit, raw))
    except (OSError, WorkspaceError) as exc:
        typer.echo(f"Error: cannot read {workdir}: {_clean(str(exc), raw)}", err=True)
        raise typer.Exit(1) from exc


def _clean(text: str, raw: bool) -> str:
    return text if raw else escape_controls(text)


async def _inspect(
    workdir: Path, session: str | None, item: str | None, offset: int, limit: int | None, raw: bool
) -> None:
    console = Console()
    workspace = LocalWorkspace(workdir, fsync=False, read_only=True)
    await workspace.initialize()
    reader: WorkspaceReader = workspace
    sessions = await reader.list_sessions()
    if session is not None and session not in sessions:
        known = ", ".join(sessions[:10]) + (" ..." if len(sessions) > 10 else "")
        raise _usage_error(
            f"no session {session!r} in {workdir}; sessions: {_clean(known, raw) or 'none'}",
            "'SESSION'",
        )
    if item is not None:
        await _show_item(console, reader, session, item, offset, limit, raw)
    elif session is not None:
        _items_table(console, _clean(session, raw), await reader.list_items(session))
    else:
        _sessions_table(console, workdir, sessions, await reader.list_items(), raw)


def _sessions_table(
    console: Console, workdir: Path, sessions: list[str], items: list[ItemInfo], raw: bool
) -> None:
    if not sessions:
        console.print(f"{workdir}: no sessions yet")
        return
    sizes: dict[str | None, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for info in items:
        sizes[info.session_id][info.kind].append(info.size)
    table = Table(title=f"Sessions in {workdir}")
    table.add_column("session", overflow="fold")
    table.add_column("offloaded context", justify="right")
    table.add_column("tool results", justify="right")
    table.add_column("data files", justify="right")
    table.add_column("total", justify="right")
    for sid in sessions:
        kinds = sizes.get(sid, {})
        cells = []
        for kind in ("context", "tool_result", "data"):
            found = kinds.get(kind, [])
            cells.append(f"{len(found)} · {_size(sum(found))}" if found else "–")
        total = sum(sum(v) for v in kinds.values())
        table.add_row(escape(_clean(sid, raw)), *cells, _size(total))
    console.print(table)
    unowned = sizes.get(None, {}).get("data", [])
    if unowned:
        console.print(f"data files not tied to a session: {len(unowned)} · {_size(sum(unowned))}")
    console.print("Items of one session: contextfold inspect WORKDIR SESSION")


def _items_table(console: Console, session: str, items: list[ItemInfo]) -> None:
    table = Table(title=f"Offloaded items of session {escape(session)}")
    table.add_column("kind")
    table.add_column("path", overflow="fold")
    table.add_column("size", justify="right")
    for info in items:
        table.add_row(info.kind, escape(escape_controls(info.path)), _size(info.size))
    console.print(table)
    console.print("Show one: contextfold inspect WORKDIR SESSION --item <path or file name>")


async def _resolve(reader: WorkspaceReader, session: str | None, item: str) -> ItemInfo | None:
    for info in await reader.list_items(session):
        if item in (info.ref, info.path) or (session is not None and item == Path(info.path).name):
            return info
    return None


async def _show_item(
    console: Console,
    reader: WorkspaceReader,
    session: str | None,
    item: str,
    offset: int,
    limit: int | None,
    raw: bool,
) -> None:
    info = await _resolve(reader, session, item)
    ref = info.ref if info is not None else item
    try:
        text = await reader.read(ref, offset=offset, limit=limit)
    except (WorkspaceError, ValueError) as exc:
        raise _usage_error(
            f"{exc}; list the items with: contextfold inspect WORKDIR SESSION", "'--item'"
        ) from exc
    if info is not None:
        path = escape(escape_controls(info.path))
        console.print(f"[bold]{path}[/] ({info.kind}, {_size(info.size)})")
    if info is not None and info.kind == "context" and not raw:
        for n, line in enumerate(text.split("\n") if text else [], start=offset):
            _print_message(console, n, line)
    else:
        typer.echo(_clean(text, raw))  # no markup, wrapping or tab expansion


def _print_message(console: Console, n: int, line: str) -> None:
    try:
        msg = Msg.model_validate_json(line)
    except ValueError:
        console.print(f"[{n}] (unreadable line) {escape(escape_controls(line[:_PREVIEW]))}")
        return
    body = transcript_entry(msg, header=False)
    if len(body) > _PREVIEW:
        body = body[:_PREVIEW] + f" [... {len(body) - _PREVIEW} more characters; --raw shows all]"
    console.print(f"[bold][{n}] {msg.role} {escape(escape_controls(msg.name))}[/]")
    console.print(escape(escape_controls(body)), soft_wrap=True)
