"""Recorded runs and a Typer app with the replay and inspect commands."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer

from contextfold.cli._inspect import inspect_workspace
from contextfold.cli._replay import replay

DATA = Path(__file__).parents[2] / "data" / "trajectories"
SWE_DIR = DATA / "swebench-verified-gemini3pro"
TAU_FILE = DATA / "tau-bench-airline-gpt4o" / "gpt-4o-airline.json"


@pytest.fixture(scope="session")
def swe_files() -> list[Path]:
    """The three smallest SWE-bench runs (fast, still long enough to compress at 8k)."""
    files = sorted(SWE_DIR.glob("*.traj.json"), key=lambda p: p.stat().st_size)
    return files[:3]


@pytest.fixture(scope="session")
def tau_file() -> Path:
    return TAU_FILE


@pytest.fixture
def cli() -> typer.Typer:
    """The two commands in an app of their own, as the main app registers them."""
    app = typer.Typer(no_args_is_help=True, add_completion=False)
    app.command()(replay)
    app.command("inspect")(inspect_workspace)
    return app
