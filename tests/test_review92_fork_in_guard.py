"""review92: a fork() made on the thread that holds ``lmdb_open.FORK_GUARD``.

The guard keeps a fork from landing between a holder mark's or a creation lock's open
and its listing in ``FORK_CLOSED_FDS`` (and between its unlisting and its close):
``os.fork()`` takes it first (its ``before`` handler). It was a plain lock, so a fork made
by the very thread inside such a region (a signal handler forking, which left90 names as
the way a child reaches a parent's mark's close; a finalizer) waited for itself: the
process hung for good. The regions have no landing point between an open and its
listing, so the state a fork finds there is whole: the guard is now re-entrant.

tests/test_begin_interrupted.py's landings (frame starts, C calls' returns) over the
mark's open and close and the creation lock's take and release, while a store is opened
and closed: at each, the trace forks instead of raising; the child checks that it holds no
descriptor of the store's folder and exits; run in a subprocess, bounded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

_SCRIPT = """
import gc, os, sys
sys.path.insert(0, sys.argv[2])
from test_begin_interrupted import _after_calls
import cpstore

path = os.path.realpath(sys.argv[1])
names = {"HolderMark.__init__", "HolderMark._drop", "HolderMark.close", "lock_folder",
         "release_folders", "unlock_folder", "CreationLock.__enter__", "CreationLock.__exit__"}


def held() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == path:
                out.append(fd)
        except OSError:
            pass
    return out


def sweep(k: int) -> str | None:
    seen, landed = [0], []

    def trace(frame, event, arg):
        name = frame.f_code.co_qualname
        if name not in names:
            return None
        frame.f_trace_opcodes = True
        if event == "call" or (event == "opcode" and frame.f_lasti in _after_calls(frame.f_code)):
            seen[0] += 1
            if seen[0] == k and not landed:
                landed.append(f"{name}@{frame.f_lasti}")
                pid = os.fork()
                if pid == 0:
                    os._exit(3 if held() else 0)
                _, status = os.waitpid(pid, 0)
                landed.append(str(os.waitstatus_to_exitcode(status)))
        return trace

    gc.disable()
    sys.settrace(trace)
    try:
        with cpstore.open(path, durability="none"):
            pass
    finally:
        sys.settrace(None)
        gc.enable()
    return " ".join(landed) if landed else None


k = 0
while True:
    k += 1
    got = sweep(k)
    if got is None:
        break
    print(got, flush=True)
print("done", k, held(), flush=True)
"""


def test_a_fork_inside_a_guarded_region_on_its_thread(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with __import__("cpstore").open(path, durability="none"):
        pass
    tests = str(Path(__file__).parent)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    try:
        done = subprocess.run(
            [sys.executable, "-c", _SCRIPT, str(path), tests],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:  # before: the first fork in a region hung
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout
        raise AssertionError(f"hung after: {out!r}") from None
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[-1].startswith("done") and lines[-1].endswith("[]"), lines
    swept = lines[:-1]
    assert len(swept) > 10, swept
    # Each child held no descriptor of the folder (the mark's or the lock's) and exited 0.
    assert [ln for ln in swept if not ln.endswith(" 0")] == [], swept
