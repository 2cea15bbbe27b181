"""Commands for the servers the tests start, made to die with the test process."""

from __future__ import annotations

import os
import sys

__all__ = ["dies_with_this_process"]

_EXEC = (
    "import ctypes, os, signal, sys; "
    "ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL); "  # PR_SET_PDEATHSIG
    "os.getppid() == int(sys.argv[1]) or sys.exit('the test process is gone'); "
    "os.execv(sys.argv[2], sys.argv[2:])"
)


def dies_with_this_process(command: list[str]) -> list[str]:
    """``command``, run so that Linux kills it when this process dies, also by SIGKILL
    (``PR_SET_PDEATHSIG``, kept across ``exec``): a killed test run left its llama.cpp
    server running, ignoring the SIGTERM it never got. Elsewhere ``command`` as is.

    The signal comes when the *thread* that started the child ends: start servers from
    the thread that lives as long as they must (pytest's, for a fixture)."""
    if not sys.platform.startswith("linux"):
        return command
    return [sys.executable, "-c", _EXEC, str(os.getpid()), *command]
