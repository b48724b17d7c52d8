"""audit41: an audit view a fork() child inherited refuses to read (ForkError).

``store.audit_view()`` holds one read txn for its block, as a checkpoint view does (see
test_audit41_fork_child_view.py): a process forking inside the block hands the child that
txn, whose reader slot the parent ends. The gates' reads through it (the latest decision
about a checkpoint, sign-offs, permits) then walk pages a writer may reuse: an error
reading a sound store, or a lookup that finds nothing where a decision is recorded. Now
every read of an inherited audit view is ForkError in the child.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from script_run import script_output

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork")

SCRIPT = r"""
import os, sys
import cpstore

st = cpstore.open(sys.argv[1])
cid = str(st.recorder("r").checkpoint(0, {"a": 1}))
cpstore.validate(cid, cid, store=st)
r, w = os.pipe()
with st.audit_view() as log:
    pid = os.fork()
    if pid == 0:
        os.close(r)
        said = []
        for name, read in (
            ("audit_records", lambda: list(log.audit_records())),
            ("latest_decision", lambda: log.latest_decision(cid)),
        ):
            try:
                read()
                said.append(f"{name} read")
            except Exception as exc:
                said.append(f"{name} {type(exc).__name__}")
        os.write(w, "\n".join(said).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as got:
        print(got.read())
    os.waitpid(pid, 0)
    print("parent", log.latest_decision(cid).kind)
st.close()
"""


def test_an_audit_view_inherited_through_fork_refuses_to_read_in_the_child(
    tmp_path: Path,
) -> None:
    stdout = script_output(SCRIPT, str(tmp_path / "s"))
    assert stdout.splitlines() == [
        "audit_records ForkError",
        "latest_decision ForkError",
        "parent decision",
    ], stdout
