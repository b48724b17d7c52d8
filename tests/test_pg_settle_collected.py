"""PostgreSQL: a batched store garbage-collected while this thread reads a lost commit back.

The read-back (pg_settle.py) holds the store's writer lock, shared, on its own connection
while it reads. A collector run inside it (any allocation) finalized another batched handle
of the same store, whose flush ran right there on this thread (try_flush_here saw no write
txn of the store on it): that write waited for the writer lock, held by this very thread's
read-back, which could not go on until the write ended. The server sees no deadlock (two
sessions, one client thread): it waited for ever, or until ``statement_timeout`` cancelled
the flush and its queue was lost. The read-back now counts as holding the lock on this
thread, as a write txn does: the finalizer hands the flush to a helper thread, which
commits once the read-back ends (docs/store.md, "Faults").
"""

from __future__ import annotations

import os
import subprocess
import sys

from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

#: A sync store whose next commit is lost after the server committed it; inside its
#: read-back, once the writer lock is held, the collector finalizes a batched handle of the
#: same store holding a queued checkpoint. ``statement_timeout`` (5 s) ends a wait for the
#: lock that would never end. Prints the queued id, the branch head once every helper flush
#: ended, and whether the lost commit was settled as stored.
_COLLECTED_IN_A_READ_BACK = """
import gc, sys, threading, warnings
import pytest
sys.path.insert(0, sys.argv[2])
from test_pg_commit_settled import _lose_the_next_checkpoint_commit
import cpstore
from cpstore.store import pg_settle
warnings.simplefilter("ignore", ResourceWarning)
url = sys.argv[1]
main = cpstore.open(url)
gc.disable()
lost = cpstore.open(url, durability="batched")
cid = lost.recorder("r").checkpoint(0, {"x": 1})
cycle = [lost]
cycle.append(cycle)
del lost, cycle
real_landed = pg_settle.landed

def landed(*args, **kwargs):
    gc.collect()  # the batched store's finalizer runs here: the writer lock is held
    return real_landed(*args, **kwargs)

mp = pytest.MonkeyPatch()
mp.setattr(pg_settle, "landed", landed)
_lose_the_next_checkpoint_commit(mp, sent=True)
second = main.recorder("m").checkpoint(0, {"m": 0})
mp.undo()
for t in threading.enumerate():
    if t.name == "cpstore-collected-flush":
        t.join(120)
print(cid, main.ref("r"), main.ref("m") == second, flush=True)
"""


def test_a_store_collected_inside_a_read_back_flushes_after_it(pg_url: str) -> None:
    """The collected store's queued checkpoint is committed (by a helper thread once the
    read-back ends), and the lost commit is settled as stored; before, the collected
    store's flush waited on this thread's own read-back until the server cancelled it and
    its checkpoint was lost (head None)."""
    url = pg_url + "&options=-c%20statement_timeout%3D5000"
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run(
        [sys.executable, "-c", _COLLECTED_IN_A_READ_BACK, url, here],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    cid, head, settled = done.stdout.split()
    assert settled == "True", done.stderr[-3000:]
    assert head == cid, f"the collected store's queued checkpoint was lost: {done.stderr[-2000:]}"
