"""A store a close left open (Env.left_open), for the tests of what follows it; usable in
a subprocess script too (:data:`SCRIPT_HEAD`)."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

import cpstore
from cpstore.errors import StoreError

#: The start of a ``python -c`` script (argv[1]: the store's path): ``path``, ``cid`` (a
#: checkpoint of run r, step 0) and the store left open, every handle closed, the
#: reading txn that kept it open ended; it prints "left open True".
SCRIPT_HEAD = f"""
import os, sys
sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
import cpstore
from cpstore.store import lmdb_registry, lmdb_txns
from left_open import fork_child_writes, left_open
lmdb_txns.CLOSE_WAIT_SECONDS = 0.5
path = sys.argv[1]
cid = left_open(path)
print("left open True", flush=True)
"""


def left_open(path: str, durability: str = "sync", match: str = "left open") -> str:
    """Open ``path`` with ``durability``, checkpoint once, and close it under another
    thread's read view held past the close's wait (``lmdb_txns.CLOSE_WAIT_SECONDS``, set
    small by the caller): left open (the close's error matching ``match``); the read then
    ends. The checkpoint's id."""
    st = cpstore.open(path, durability=durability)  # type: ignore[arg-type]
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    with read_held(st, cid), pytest.raises(StoreError, match=match):
        st.close()
    return cid


@contextmanager
def read_held(st: cpstore.Store, cid: str) -> Iterator[None]:
    """Another thread's read view of ``st`` (of checkpoint ``cid``), held for the block."""
    opened, release = threading.Event(), threading.Event()

    def reader() -> None:
        with st.read(cid):
            opened.set()
            release.wait(30)

    thread = threading.Thread(target=reader)
    thread.start()
    assert opened.wait(30)
    try:
        yield
    finally:
        release.set()
        thread.join(30)


def fork_child_writes(path: str, durability: str = "sync") -> None:
    """fork(); the child opens ``path`` with ``durability`` and records step 1 of run r,
    printing "child wrote" (or what it raised); the parent prints the child's status."""
    pid = os.fork()
    if pid == 0:
        try:
            with cpstore.open(path, durability=durability) as child:  # type: ignore[arg-type]
                child.recorder("r").checkpoint(1, {"a": 2})
                print("child wrote", flush=True)
        except BaseException as exc:  # what the child met is the point
            print("child", type(exc).__name__, exc, flush=True)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    print("child status", status, flush=True)


def check_child_wrote(out: subprocess.CompletedProcess[str], path: str) -> list[str]:
    """The script ended well, the store was left open and the fork child wrote step 1
    (before audit49/audit50: ForkError in the child). The script's lines."""
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    lines = out.stdout.splitlines()
    assert lines[0] == "left open True", lines
    assert "child wrote" in lines, lines
    assert "child status 0" in lines, lines
    with cpstore.open(path, readonly=True, create=False) as ro:
        assert [m.step for m in ro.history("r")] == [1, 0]
    return lines
