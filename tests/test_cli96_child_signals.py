"""cli96: a command whose work runs in a child (copy, compact, verify, audit --check) never
leaves that child running after the command ends.

SIGTERM (``timeout``, ``kill``, a supervisor) or SIGHUP (a closed terminal) to the command
killed the parent at once and left the child alone: a ``copy`` said nothing, then went
on writing and verifying DEST after the command had ended, and a ``compact`` kept the
store's locks. Now the command kills its child, cleans up as after Ctrl-C and exits
128 + the signal; a signal ignored when it started (``nohup``) stays ignored; and on Linux
the child dies with a parent killed by SIGKILL.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from small_store import small_store

import cpstore

#: The copy command, its copy held (in the child) until a file named "go" appears; the
#: child's pid is written to "started" once the copy is written, before it waits.
_HELD_COPY = r"""
import os, sys, time
from cpstore.cli import entry, maintenance_commands as mc
src, dest, marks = sys.argv[1:4]
real = mc.copy_store

def held(store, into, *, compact):
    report = real(store, into, compact=compact)
    with open(os.path.join(marks, "started.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.replace(os.path.join(marks, "started.tmp"), os.path.join(marks, "started"))
    for _ in range(1200):
        if os.path.exists(os.path.join(marks, "go")):
            break
        time.sleep(0.05)
    return report

mc.copy_store = held
sys.exit(entry.main(["copy", dest, "--store", src]))
"""


def _store(tmp_path: Path) -> str:
    return small_store(tmp_path, "src")


def _start(
    tmp_path: Path, src: str, dest: str, **popen: object
) -> tuple[subprocess.Popen[str], int]:
    """The held copy, running; (its process, its child's pid) once the copy is written."""
    marks = tmp_path / "marks"
    marks.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-c", _HELD_COPY, src, dest, str(marks)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,  # type: ignore[call-overload]
    )
    started = marks / "started"
    for _ in range(1200):
        if started.exists() or proc.poll() is not None:
            break
        time.sleep(0.05)
    assert started.exists(), proc.communicate()
    return proc, int(started.read_text())


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie is not: it ran to its end)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _gone_soon(pid: int) -> bool:
    """Whether ``pid`` ends within 30 s (it should end at once)."""
    for _ in range(600):
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


def _reap(pid: int) -> None:
    """Kill a child the test left running (the unfixed code's orphan)."""
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)


pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="/proc and PR_SET_PDEATHSIG: Linux"
)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_an_ended_copy_kills_its_child_and_leaves_no_copy(
    tmp_path: Path, signum: signal.Signals
) -> None:
    src = _store(tmp_path)
    dest = tmp_path / "dest"
    proc, child = _start(tmp_path, src, str(dest))
    try:
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
        assert _gone_soon(child), "the copy's child outlived the command"
        assert proc.returncode == 128 + signum, (proc.returncode, err)
        assert err.strip() == f"cpstore copy: terminated ({signum.name})"
        assert out == ""
        assert not dest.exists()  # a new DEST: the unfinished copy is removed with it
    finally:
        _reap(child)
    with cpstore.open(src, readonly=True) as store:  # the source as it was
        assert store.verify().ok and len(store.history("run")) == 3


def test_a_hangup_the_command_ignores_lets_the_copy_finish(tmp_path: Path) -> None:
    """Under nohup (SIGHUP ignored) a hangup changes nothing: the copy completes."""
    src = _store(tmp_path)
    dest = tmp_path / "dest"

    def ignore_hangup() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    proc, child = _start(tmp_path, src, str(dest), preexec_fn=ignore_hangup)
    try:
        proc.send_signal(signal.SIGHUP)
        (tmp_path / "marks" / "go").touch()
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert out.startswith(f"copied to {dest}")
    finally:
        _reap(child)
    with cpstore.open(str(dest), readonly=True) as copy:
        assert copy.verify().ok and len(copy.history("run")) == 3


def test_a_command_killed_by_sigkill_takes_its_child_with_it(tmp_path: Path) -> None:
    src = _store(tmp_path)
    proc, child = _start(tmp_path, src, str(tmp_path / "dest"))
    try:
        proc.kill()
        proc.communicate(timeout=60)
        assert _gone_soon(child), "the copy's child outlived a command killed by SIGKILL"
    finally:
        _reap(child)
