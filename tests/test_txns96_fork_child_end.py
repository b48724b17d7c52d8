"""txns96: a fork() child ending a read another of the parent's threads entered.

A read's holder (a checkpoint view, a ``store.read()`` block) knows the thread that began
it (``_who``); the parent's reader entry is that thread's. A fork() child has one thread,
the one that forked: ending there a view another parent thread entered (handed to the
forking thread, closed by the child's cleanup) removed the calling thread's entry, not
the holder's: ``ValueError`` when the forking thread had none, or the forking thread's
own live read's entry when it had one (the child's ``holds_read`` then False inside its
read, the other thread's entry left for good). The child now removes the holder's.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from script_run import script_output

SCRIPT = r"""
import os, sys, threading
from cpstore.store.facade import open as open_store

st = open_store(sys.argv[1], durability="none")
env = st._backend.env
nested = sys.argv[2] == "nested"
cid = st.recorder("r").checkpoint(0, {"a": 1})
box, go, done = [], threading.Event(), threading.Event()

def holder():
    view = st.read(cid)
    view.__enter__()  # the view's read is this thread's: handed to the main thread
    box.append(view)
    go.set()
    done.wait()
    view.__exit__(None, None, None)

t = threading.Thread(target=holder)
t.start()
go.wait()
other = t.ident
r, w = os.pipe()

def child() -> None:
    try:
        box[0].__exit__(None, None, None)  # the parent's other thread's view, ended here
        said = "ended"
    except Exception as exc:
        said = type(exc).__name__
    me = threading.get_ident()
    os.write(w, f"{said} {list(env._active).count(other)} {list(env._active).count(me)} "
                f"{env.holds_read()}".encode())
    os._exit(0)

if nested:
    with st.read(cid) as mine:
        pid = os.fork()
        if pid == 0:
            child()
        assert mine.state() == {"a": 1}
else:
    pid = os.fork()
    if pid == 0:
        child()
os.close(w)
said = os.read(r, 200).decode()
os.waitpid(pid, 0)
done.set()
t.join()
st.close()
print(said)
"""


@pytest.mark.parametrize("nested", ["alone", "nested"])
def test_a_child_ends_another_parent_threads_view_by_its_holders_entry(
    tmp_path: Path, nested: str
) -> None:
    """The child's end of a view another parent thread entered removes that thread's
    reader entry: no error, and the forking thread's own read (``nested``) stays held."""
    said, others, mine, holds = script_output(SCRIPT, str(tmp_path / "s"), nested).split()
    assert said == "ended"
    assert others == "0"
    assert (mine, holds) == (("1", "True") if nested == "nested" else ("0", "False"))
