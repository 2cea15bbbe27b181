"""The HTML report: self-contained, and rendered by a real browser."""

from __future__ import annotations

import asyncio
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from contextfold._exceptions import MissingDependencyError
from contextfold.replay import ReplayResult, load_trajectory, replay_runs, write_report

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PLOT_BLUE = (0x1F, 0x77, 0xB4)  # the request-total line


@pytest.fixture(scope="module")
def result(swe_files: list[Path]) -> ReplayResult:
    runs = [(load_trajectory(p), str(p)) for p in swe_files]
    return asyncio.run(replay_runs(runs, context_size=8000))


@pytest.fixture(scope="module")
def report(result: ReplayResult, tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("plotly", reason="the report needs contextfold[report]")
    return write_report(result, tmp_path_factory.mktemp("report") / "r.html")


def test_report_is_self_contained(report: Path) -> None:
    page = report.read_text(encoding="utf-8")
    assert "<script src=" not in page.replace('<script src="data:', "")
    assert "plotly.js v" in page  # the library itself is inlined
    assert page.count('class="plotly-graph-div"') == 3


def test_report_has_every_run_in_its_table(report: Path, result: ReplayResult) -> None:
    page = report.read_text(encoding="utf-8")
    for run in result.runs:
        assert f">{run.run_id}</td>" in page
    assert "<td>total</td>" in page


def test_report_without_plotly_names_the_extra(
    result: ReplayResult, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "plotly", None)
    monkeypatch.setitem(sys.modules, "plotly.graph_objects", None)
    with pytest.raises(MissingDependencyError, match=r"contextfold\[report\]"):
        write_report(result, tmp_path / "r.html")


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and unfiltered rows of an 8-bit RGB or RGBA PNG."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, header = 8, b"", b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = body
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, color = struct.unpack(">IIBB", header[:10])
    assert depth == 8
    assert color in (2, 6)
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        start = y * (stride + 1)
        kind, line = raw[start], bytearray(raw[start + 1 : start + 1 + stride])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else b if pb <= pc else c
                line[i] = (line[i] + pred) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, bpp, rows


def _chromium(*args: str, profile: Path) -> subprocess.CompletedProcess[str]:
    assert CHROMIUM is not None
    return subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            f"--user-data-dir={profile}",
            "--virtual-time-budget=10000",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install chromium)")
def test_report_renders_its_plots_in_headless_chromium(report: Path, tmp_path: Path) -> None:
    png = tmp_path / "shot.png"
    shot = _chromium(
        f"--screenshot={png}", "--window-size=1200,900", report.as_uri(), profile=tmp_path / "p1"
    )
    assert png.is_file(), shot.stderr[-2000:]
    width, bpp, rows = _png_pixels(png.read_bytes())
    pixels = [row[i : i + 3] for row in rows for i in range(0, width * bpp, bpp)]
    non_white = sum(1 for p in pixels if min(p) < 235)
    blue = sum(
        1 for p in pixels if all(abs(v - t) <= 40 for v, t in zip(p, PLOT_BLUE, strict=True))
    )
    assert non_white > 0.05 * len(pixels)  # not a blank page
    assert blue > 300  # the request-total line was drawn
    dom = _chromium("--dump-dom", report.as_uri(), profile=tmp_path / "p2").stdout
    assert dom.count("js-plotly-plot") >= 3  # plotly ran and drew every figure
    assert 'class="main-svg"' in dom
