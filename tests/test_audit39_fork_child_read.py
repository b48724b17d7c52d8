"""audit39: a fork() child leaving an inherited read block leaves the parent's reader slots.

A process that forks inside ``with store.read(...)`` (or a checkpoint view) hands the child
the same py-lmdb txn objects, whose reader slots live in the shared ``lock.mdb``. The child
leaving the block ran ``end_read``: ``txn.abort()`` reset the parent's slot of that read
(its snapshot no longer protected: a writer may reuse its pages under the parent's views),
and since e04147d ``_drop_unused_txns`` also freed the txn objects the environment holds
for the parent, giving their slots away while the parent still owns them (its later free
clears whatever reader took the slot meanwhile). Now the child only leaves the bookkeeping:
LMDB's txns and slots stay the parent's.
"""

from __future__ import annotations

import ast
from pathlib import Path

from script_run import script_output

SCRIPT = r"""
import os, sys, threading
from cpstore.store.facade import open as open_store

st = open_store(sys.argv[1], durability="none")
env = st._backend.env
cid = st.recorder("r").checkpoint(0, {"a": 1})
for _ in range(3):
    with st.read(cid) as v:
        v.state()
go, done = threading.Event(), threading.Event()

def holder():
    with st.read(cid) as v:
        go.set()
        done.wait()

t = threading.Thread(target=holder)
t.start()
go.wait()
r, w = os.pipe()
with st.read(cid) as v:
    before = env.env.readers()
    pid = os.fork()
    if pid:
        os.close(w)
        os.read(r, 1)
        os.waitpid(pid, 0)
        after = env.env.readers()
        assert v.state() == {"a": 1}
if pid == 0:  # the child has left the block: its end_read ran
    os.write(w, b"x")
    os._exit(0)
done.set()
t.join()
print(repr(before))
print(repr(after))
st.close()
"""


def _rows(listing: str) -> list[tuple[str, ...]]:
    return sorted(tuple(line.split()) for line in listing.splitlines()[1:] if line.strip())


def test_a_child_leaving_an_inherited_read_block_leaves_the_parents_reader_slots(
    tmp_path: Path,
) -> None:
    stdout = script_output(SCRIPT, str(tmp_path / "s"))
    before, after = (ast.literal_eval(line) for line in stdout.splitlines()[-2:])
    live = [row for row in _rows(before) if row[2] != "-"]
    assert len(live) == 2, before  # the holder thread's read and the forking thread's
    assert _rows(after) == _rows(before), (before, after)
