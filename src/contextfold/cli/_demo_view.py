"""How the demo is shown: a live terminal view, or plain lines for pipes and CI."""

from __future__ import annotations

import time
from typing import Protocol

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from ..context import ContextUsage

__all__ = ["DemoView", "LiveView", "PlainView", "layers_line"]

_BAR = 50
_LAYERS = (
    ("system prompt + tools", "bold blue"),
    ("summary", "bold magenta"),
    ("context", "bold green"),
)


def _layers(usage: ContextUsage) -> tuple[int, int, int]:
    # Tools and the per-request framing are sent with the system prompt, every time.
    return usage.system + usage.tools + usage.overhead, usage.summary, usage.context


def layers_line(step: int, usage: ContextUsage) -> str:
    """One line of text with the three layers' tokens against the window."""
    system, summary, context = _layers(usage)
    return (
        f"step {step} input: system prompt+tools {system:,} · summary {summary:,} · "
        f"context {context:,} = {usage.total:,} of {usage.context_size:,} tokens "
        f"({usage.ratio:.0%})"
    )


class DemoView(Protocol):
    """Where the demo's lines, layer usage and status go."""

    def start(self) -> None:
        """Begin showing."""

    def stop(self) -> None:
        """Stop showing; what was logged stays."""

    def log(self, line: Text) -> None:
        """Show one event, permanently."""

    def usage(self, step: int, usage: ContextUsage) -> None:
        """The layers' usage of the model input of ``step``."""

    def status(self, text: str) -> None:
        """What is happening right now (transient)."""


class PlainView:
    """Line by line, no cursor movement: for pipes, files and CI logs."""

    def __init__(self, console: Console) -> None:
        self.console = console

    def start(self) -> None:
        """Nothing to set up."""

    def stop(self) -> None:
        """Nothing to tear down."""

    def log(self, line: Text) -> None:
        """Print the line."""
        self.console.print(line, highlight=False, soft_wrap=True)

    def usage(self, step: int, usage: ContextUsage) -> None:
        """Print the layers as one line."""
        self.console.print(layers_line(step, usage), highlight=False, soft_wrap=True)

    def status(self, text: str) -> None:
        """Transient; not printed."""


class LiveView:
    """Events scroll above a live panel of the three layers against the window."""

    def __init__(self, console: Console, *, trigger_ratio: float, model_name: str) -> None:
        self.console = console
        self.trigger_ratio = trigger_ratio
        self.model_name = model_name
        self._usage: ContextUsage | None = None
        self._step = 0
        self._status = "starting"
        self._since = time.monotonic()
        self._started = time.monotonic()
        self._live = Live(
            get_renderable=self._render,
            console=console,
            refresh_per_second=6,
            transient=False,
        )

    def start(self) -> None:
        """Start the live panel."""
        self._live.start()

    def stop(self) -> None:
        """Freeze the panel where it is."""
        self._status = "done"
        self._live.refresh()
        self._live.stop()

    def log(self, line: Text) -> None:
        """Print above the panel."""
        self._live.console.print(line, highlight=False, soft_wrap=True)

    def usage(self, step: int, usage: ContextUsage) -> None:
        """Update the bars."""
        self._step, self._usage = step, usage

    def status(self, text: str) -> None:
        """Update the status line."""
        self._status = text
        self._since = time.monotonic()

    def _bar(self, usage: ContextUsage) -> Text:
        size = usage.context_size
        cells = [round(n * _BAR / size) for n in _layers(usage)]
        bar = Text()
        for (_, style), n in zip(_LAYERS, cells, strict=True):
            bar.append("█" * n, style=style)
        free = max(_BAR - sum(cells), 0)
        trigger = round(self.trigger_ratio * _BAR)
        for i in range(sum(cells), sum(cells) + free):
            bar.append("┆" if i == trigger else "░", style="yellow" if i == trigger else "dim")
        return bar

    def _render(self) -> RenderableType:
        table = Table.grid(padding=(0, 1))
        table.add_column(justify="right", style="bold")
        table.add_column()
        table.add_column(justify="right")
        usage = self._usage
        if usage is not None:
            size = usage.context_size
            table.add_row(
                f"window {size:,}",
                self._bar(usage),
                f"{usage.total:,} ({usage.ratio:.0%}) at step {self._step}",
            )
            for (label, style), tokens in zip(_LAYERS, _layers(usage), strict=True):
                filled = round(tokens * _BAR / size)
                row = Text("█" * filled, style=style) + Text("░" * (_BAR - filled), style="dim")
                table.add_row(label, row, f"{tokens:,}")
            table.add_row(
                "",
                Text(
                    f"┆ compression trigger at {self.trigger_ratio:.0%} "
                    f"({int(self.trigger_ratio * size):,} tokens)",
                    style="yellow",
                ),
                "",
            )
        spinner = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"[int(time.monotonic() * 8) % 10]
        waited = time.monotonic() - self._since
        total = time.monotonic() - self._started
        head = Text(f"{spinner} {self._status}", style="cyan")
        head.append(f"  ({waited:.0f}s; {total:.0f}s in all; {self.model_name})", style="dim")
        return Group(Text("─" * 80, style="dim"), table, head)
