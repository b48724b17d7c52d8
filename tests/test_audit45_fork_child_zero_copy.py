"""audit45: what a checkpoint view handed out before a fork() refuses to read in the child.

audit41 made a view inherited through ``os.fork()`` raise ForkError where it reads
through its txn (``_object``, a chunked value, the whole-state fast path,
``verify_objects``). What a view had already handed out read on: its cached zero-copy
token log (``token_records()``, ``token_value_views()``, and ``token(i)`` through them)
and the replay cursor built from it (``ReplaySession(cp).cursor``, which checks only the
view's lease). Those are slices of the parent's txn; the parent ends that txn when it
leaves its block and its writer then reuses the pages. Probed before the fix, the parent
left its block and wrote 300 checkpoints, then in the child: ``token(3)`` said
"IntegrityError: token value offsets out of range" and the cursor "ReplayDivergenceError:
recorded token does not have recorded provenance" — a sound store reported corrupt and a
faithful replay reported divergent. Now each is ForkError (the child's lease is empty).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fork_child import TELL_EACH
from script_run import run_script

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork")

#: argv: the store. Prints what each read of the child raised, one per line, then the
#: parent's own reads after the child ended. Run after fork_child.TELL_EACH.
SCRIPT = r"""
import os, sys
import cpstore
import cpstore.errors
from cpstore.replay.session import ReplaySession

st = cpstore.open(sys.argv[1])
rec = st.recorder("r")
for i in range(20):
    rec.token("rng", i)
cid = str(rec.checkpoint(0, {"a": 1}))
rec.close()
r, w = os.pipe()
go_r, go_w = os.pipe()
with st.read(cid) as view:
    session = ReplaySession(view)
    view.token(0)  # caches the zero-copy token log
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.close(go_w)
        os.read(go_r, 1)  # the parent has left its block and written
        tell_each(
            w,
            (
                ("token", lambda: view.token(3)),
                ("token_records", view.token_records),
                ("token_value_views", view.token_value_views),
                ("cursor", lambda: session.cursor.resolve("rng")),
            ),
        )
    os.close(w)
    os.close(go_r)
    first = session.cursor.resolve("rng")
other = st.recorder("x")
for i in range(100):
    for j in range(20):
        other.token("rng", i * 100 + j)
    other.checkpoint(i, {"a": os.urandom(64).hex()})
other.close()
os.write(go_w, b"g")
with os.fdopen(r) as got:
    print(got.read())
os.waitpid(pid, 0)
with st.read(cid) as again:
    session = ReplaySession(again)
    print("parent", first, [session.cursor.resolve("rng") for _ in range(20)] == list(range(20)))
st.close()
"""


def test_what_a_view_handed_out_refuses_to_read_in_a_fork_child(tmp_path: Path) -> None:
    out = run_script(TELL_EACH + SCRIPT, str(tmp_path / "s"), timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:-1] == [
        f"{name} ForkError" for name in ("token", "token_records", "token_value_views", "cursor")
    ], out.stdout
    assert lines[-1] == "parent 0 True", out.stdout


#: argv: the store. A view left in the parent still reads there after a fork, and a
#: view left before the fork says closed in the child, not ForkError.
SCRIPT_PARENT = r"""
import os, sys
import cpstore
import cpstore.errors
from cpstore.replay.session import ReplaySession

st = cpstore.open(sys.argv[1])
rec = st.recorder("r")
rec.token("rng", 7)
cid = str(rec.checkpoint(0, {"a": 1}))
rec.close()
with st.read(cid) as old:
    old_session = ReplaySession(old)
with st.read(cid) as view:
    session = ReplaySession(view)
    pid = os.fork()
    if pid == 0:
        try:
            old_session.cursor.resolve("rng")
            os._exit(3)
        except cpstore.errors.ForkError:
            os._exit(4)
        except cpstore.errors.InvalidInputError:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status))
    print("parent", session.cursor.resolve("rng"), view.token(0)[3])
st.close()
"""


def test_the_parent_reads_on_and_a_view_left_before_the_fork_says_closed(tmp_path: Path) -> None:
    out = run_script(SCRIPT_PARENT, str(tmp_path / "s"), timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["child 0", "parent 7 7"], out.stdout
