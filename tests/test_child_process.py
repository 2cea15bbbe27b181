"""``tests.child_process``: a server the tests start dies with the process that started it,
even when that process is killed (a killed test run left its llama.cpp server running)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from tests.child_process import dies_with_this_process

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie waiting for its reaper is gone
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_child_dies_when_its_starter_is_killed() -> None:
    starter = textwrap.dedent(
        """
        import subprocess, sys, time
        from tests.child_process import dies_with_this_process
        sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
        child = subprocess.Popen(dies_with_this_process(sleep))
        print(child.pid, flush=True)
        time.sleep(60)
        """
    )
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.Popen(
        [sys.executable, "-c", starter], cwd=root, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    child = int(proc.stdout.readline())
    try:
        time.sleep(0.5)  # the child has set its parent-death signal and exec'd
        assert _alive(child)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 10
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(child), "the child outlived the process that started it"
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def test_the_command_runs_as_given() -> None:
    command = [sys.executable, "-c", "import sys; print(sys.argv[1:])", "a b", "-c"]
    out = subprocess.run(dies_with_this_process(command), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "['a b', '-c']"
