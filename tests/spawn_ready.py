"""Kill tests start their timer when the child is ready, not when it was spawned.

A SIGKILL test sleeps a random while and kills a writer; it means to kill *mid-write*.
Timed from the spawn, the while included the interpreter's start and the imports
(~0.2 s quiet, over a second on a loaded 2-core machine): under load every child was
killed before its first checkpoint, and the tests failed with nothing acknowledged
(CI, 3 tests at once). A child prints ``ready`` once its store is open; the parent
reads exactly that line (byte by byte from the pipe, so nothing after it is taken
from ``communicate``) and only then starts the timer.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

import pytest

#: The line a child prints (flushed) once its store is open and it is about to write.
READY = "ready"


def spawn_ready(args: list[str], timeout: float = 120.0) -> subprocess.Popen[str]:
    """``python -c args[0] args[1:]``, returned once it printed :data:`READY`."""
    child = subprocess.Popen(
        [sys.executable, "-c", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None
    fd, got, deadline = child.stdout.fileno(), b"", time.monotonic() + timeout
    while not got.endswith(b"\n"):
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        byte = os.read(fd, 1) if ready else b""
        if not byte:
            child.kill()
            _, err = child.communicate(timeout=60)
            pytest.fail(
                f"the child never said {READY!r} (got {got!r}; rc {child.returncode}):\n{err}"
            )
        got += byte
    if got.decode().strip() != READY:
        child.kill()
        pytest.fail(f"the child's first line was {got!r}, not {READY!r}")
    return child
