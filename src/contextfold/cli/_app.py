"""The Typer application; each command lives in its own module."""

from __future__ import annotations

import typer

from ._demo import demo
from ._inspect import inspect_workspace
from ._replay import replay
from ._serve import serve

__all__ = ["app", "main"]

app = typer.Typer(
    name="contextfold",
    help="Keep long-running LLM agents inside their context window.",
    no_args_is_help=True,
    add_completion=False,
)
app.command()(demo)
app.command()(replay)
app.command("inspect")(inspect_workspace)
app.command()(serve)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("contextfold")
    except PackageNotFoundError:
        return "unknown (not installed; running from a source tree)"


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"contextfold {_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print the version and exit.",
    ),
) -> None:
    """contextfold: context management for LLM agents."""


def main() -> None:
    """Entry point of the ``contextfold`` console script."""
    app()
