"""audit41: a fork() child closing a store handle its parent was closing does not hang.

audit39 (6247d82) made a second close of one handle wait for the first (``_closer``: its
thread and an Event set when done), so two threads closing at once release the shared
environment once. A process forked while one of its threads was inside that close (a
batched flush, or the close's wait for other threads' reads, up to 5 s) hands the child
the claim: the child's own close of the handle (a ``with`` block ending, a cleanup) waited
for an Event no thread of the child will ever set, and the child hung for ever. Before
audit39 that close returned (a child closes nothing: lmdb_registry.release_env).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from script_run import script_output

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork")

#: argv: the store, then what the thread inside the close holds it in ("flush": a batched
#: flush; "reads": the close's wait for another thread's open read). Prints the child's
#: wait status, or "hung" when it had not ended within 20 s (then killed).
SCRIPT = r"""
import os, sys, threading, time
from cpstore.store import lmdb_txns
from cpstore.store.facade import open as open_store

held = sys.argv[2]
st = open_store(sys.argv[1], durability="batched" if held == "flush" else "sync")
backend = st._backend
cid = st.recorder("r").checkpoint(0, {"a": 1})
inside, release = threading.Event(), threading.Event()
if held == "flush":
    flush = backend.flush

    def held_flush():
        inside.set()
        release.wait(60)
        flush()

    backend.flush = held_flush
    reader = None
else:
    lmdb_txns.CLOSE_WAIT_SECONDS = 120.0  # the close waits for the read, not for a bound
    reading = threading.Event()

    def read():
        with st.read(cid) as view:
            reading.set()
            release.wait(60)
            view.state()

    reader = threading.Thread(target=read)
    reader.start()
    reading.wait(60)
closer = threading.Thread(target=st.close)
closer.start()
if held == "flush":
    inside.wait(60)
else:
    while not backend.env.closing:  # the close waits for the read now
        time.sleep(0.01)
pid = os.fork()
if pid == 0:
    try:
        st.close()
    finally:
        os._exit(0)
for _ in range(200):
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    time.sleep(0.1)
else:
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    status = "hung"
release.set()
closer.join(60)
if reader is not None:
    reader.join(60)
print("child", status, "parent closed", st._backend.closed)
"""


@pytest.mark.parametrize("held", ["flush", "reads"])
def test_a_fork_child_closing_a_handle_its_parent_is_closing_returns(
    tmp_path: Path, held: str
) -> None:
    stdout = script_output(SCRIPT, str(tmp_path / "s"), held, timeout=180)
    assert stdout.split() == ["child", "0", "parent", "closed", "True"], stdout
