"""audit41: a checkpoint view a fork() child inherited refuses to read (ForkError).

A process that forks inside ``with store.read(...) as view`` hands the child the view and
its py-lmdb txn. Every store call of the child raises ForkError (docs/durability.md,
"fork()"), but the view read on through the inherited txn: its reader slot is the
parent's, which ends it when it leaves its own block (audit39 keeps the child from ending
it), and from then on a writer may reuse the pages the child walks. Probed: the parent
left its reads and wrote 300 checkpoints, then each of the child's 40 inherited views
said "IntegrityError: the LMDB data file is corrupt" (MDB_PAGE_NOTFOUND; exit 5) of a
sound store, or with verify=False "LMDB failed" (MDB_BAD_DBI); nothing stopped a reused
page from reading as another value. Now a read through an inherited view is ForkError
(exit 7); leaving its block in the child still only leaves the bookkeeping.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from fork_child import TELL_EACH
from script_run import script_output

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork")

#: argv: the store. Prints what the child's reads raised, one per line, then the
#: parent's own read of its view after the child ended. Run after fork_child.TELL_EACH.
SCRIPT = r"""
import os, sys
import cpstore

st = cpstore.open(sys.argv[1])
small = str(st.recorder("r").checkpoint(0, {"a": "x" * 100, "big": os.urandom(300_000)}))
whole = str(st.recorder("b").checkpoint(0, os.urandom(300_000)))
r, w = os.pipe()
with st.read(small) as view, st.read(whole) as chunked:
    pid = os.fork()
    if pid == 0:
        os.close(r)
        tell_each(
            w,
            (
                ("state", view.state),
                ("state_part", lambda: view.state_part("a")),
                ("chunked_part", lambda: view.state_part("big")),
                ("chunked_bytes", chunked.state),
                ("verify_objects", view.verify_objects),
            ),
        )
    os.close(w)
    with os.fdopen(r) as got:
        print(got.read())
    os.waitpid(pid, 0)
    print("parent", sorted(view.state()))
st.close()
"""


def test_a_view_inherited_through_fork_refuses_to_read_in_the_child(tmp_path: Path) -> None:
    stdout = script_output(TELL_EACH + SCRIPT, str(tmp_path / "s"))
    lines = stdout.splitlines()
    assert lines[:-1] == [
        f"{name} ForkError"
        for name in ("state", "state_part", "chunked_part", "chunked_bytes", "verify_objects")
    ], stdout
    assert lines[-1] == "parent ['a', 'big']", stdout
    assert os.path.exists(tmp_path / "s" / "data.mdb")
