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
from fork_child import TELL_EACH
from script_run import script_output

import cpstore
from cpstore.errors import InvalidInputError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork")

#: argv: the store. Run after fork_child.TELL_EACH.
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
        tell_each(
            w,
            (
                ("audit_records", lambda: list(log.audit_records())),
                ("latest_decision", lambda: log.latest_decision(cid)),
            ),
        )
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
    stdout = script_output(TELL_EACH + SCRIPT, str(tmp_path / "s"))
    assert stdout.splitlines() == [
        "audit_records ForkError",
        "latest_decision ForkError",
        "parent decision",
    ], stdout


#: argv: the store. The parent starts an audit_records() iteration, forks, then appends
#: 300 records; the child, let go after that, resumes the iteration and says what it met.
ITERATION = r"""
import os, sys
import cpstore
from cpstore.store.audit import append_audit

st = cpstore.open(sys.argv[1])
for i in range(50):
    append_audit(st._backend, "note", {"i": i})
r, w = os.pipe()
go_r, go_w = os.pipe()
with st.audit_view() as log:
    it = log.audit_records()
    next(it)
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.close(go_w)
        os.read(go_r, 1)
        try:
            said = f"read {len(list(it))}"
        except Exception as exc:
            said = type(exc).__name__
        os.write(w, said.encode())
        os._exit(0)
    os.close(w)
    os.close(go_r)
for i in range(300):
    append_audit(st._backend, "note", {"i": i, "pad": "y" * 200})
os.write(go_w, b"g")
with os.fdopen(r) as got:
    print("child", got.read() or "nothing")
_, status = os.waitpid(pid, 0)
print("status", os.waitstatus_to_exitcode(status))
st.close()
"""


def test_an_audit_iteration_begun_before_fork_refuses_to_go_on_in_the_child(
    tmp_path: Path,
) -> None:
    # Before: the child read on through the parent's cursor and died in LMDB's assertion
    # (mdb_cursor_sibling, SIGABRT: "child nothing", status -6).
    stdout = script_output(ITERATION, str(tmp_path / "s"))
    assert stdout.split() == ["child", "ForkError", "status", "0"], stdout


def test_an_audit_view_used_after_its_block_says_closed(tmp_path: Path) -> None:
    # Before: py-lmdb's raw lmdb.Error ("Attempt to operate on closed/deleted/dropped
    # object"), which the command line reports as a bug (exit 1).
    with cpstore.open(tmp_path / "s") as st:
        cid = str(st.recorder("r").checkpoint(0, {"a": 1}))
        cpstore.validate(cid, cid, store=st)
        with st.audit_view() as log:
            it = log.audit_records()
            first = next(it)
            assert first.index == 0
        with pytest.raises(InvalidInputError, match="the audit view is closed"):
            next(it)
        with pytest.raises(InvalidInputError, match="the audit view is closed"):
            log.latest_decision(cid)
        with pytest.raises(InvalidInputError, match="the audit view is closed"):
            list(log.audit_records())
        with st.audit_view() as again:  # a new view reads as before
            latest = again.latest_decision(cid)
            assert latest is not None and latest.kind == "decision"
