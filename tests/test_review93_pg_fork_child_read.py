"""review93: a fork() child leaving a PostgreSQL read block its parent was in.

audit39 made an LMDB store's child leave an inherited read block without ending the
parent's read. A PostgreSQL store's child still ran ``end_read``: ``PgTxn.abort`` sent
``ROLLBACK`` on the connection it inherited, which is the parent's server session, so the
parent's REPEATABLE READ snapshot ended under it: its next statement in the block ran in a
new transaction of its own, and the parent read a ref another writer wrote since it entered
the block (and, beside a sweep, a checkpoint's parts from two states). A child
leaving such a block (``sys.exit()`` in it unwinds it too) now only leaves it, as on LMDB.
"""

from __future__ import annotations

import sys

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from script_run import script_output

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork")

SCRIPT = r"""
import os, sys
import cpstore
from cpstore.store.model import ref_key

url, kind, leave = sys.argv[1], sys.argv[2], sys.argv[3]
st = cpstore.open(url)
other = cpstore.open(url)  # another handle: its own connections
run = f"r-{kind}-{leave}"
cid = st.recorder(run).checkpoint(0, {"a": 1})
refs, key = st.backend.db("refs"), ref_key(run, "main")


def block():
    if kind == "view":
        return st.read(cid)
    return st.backend.read_txn()


with block() as held:
    txn = held if kind == "txn" else held._txn
    assert txn.get(key, None, refs) is not None
    stamp = txn._conn.execute("SELECT now()").fetchone()[0]
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        if leave == "exit":  # sys.exit() unwinds the block in the child
            try:
                sys.exit(0)
            finally:
                os.write(w, b"x")
    else:
        os.close(w)
        os.read(r, 1)
        os.waitpid(pid, 0)
        # Committed after the block began: its snapshot must not see the new run's ref.
        moved = other.recorder(run + "-new").checkpoint(0, {"a": 2})
        print("snapshot", txn.get(ref_key(run + "-new", "main"), None, refs) is None)
        print("same-txn", txn._conn.execute("SELECT now()").fetchone()[0] == stamp)
if pid == 0:  # the child left the block normally
    os.write(w, b"x")
    os._exit(0)
with st.read(moved) as cp:
    print("after", cp.state() == {"a": 2})
other.close()
st.close()
"""


@pytest.mark.parametrize("leave", ["end", "exit"])
@pytest.mark.parametrize("kind", ["view", "txn"])
def test_a_child_leaving_an_inherited_pg_read_block_leaves_the_parents_snapshot(
    pg_url: str,  # noqa: F811 - the fixture
    kind: str,
    leave: str,
) -> None:
    out = script_output(SCRIPT, pg_url, kind, leave, timeout=180)
    assert out.split() == ["snapshot", "True", "same-txn", "True", "after", "True"], out
