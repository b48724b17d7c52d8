"""After a close left the environment open (Env.left_open), every handle closed and the
txn that kept it open ended, the store opens as if closed: with another durability or
read-only, compacted, and in a fork() child. They were refused "already open in this
process" (or ForkError in a child) for the rest of the process (audit49)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from script_run import run_script

import cpstore
from cpstore.errors import StoreError
from cpstore.store import compact_store, lmdb_txns


def _left_open(path: str) -> bytes | str:
    """Open ``path``, checkpoint once, and close it under another thread's read view held
    past the close's wait: left open; the read then ends. The checkpoint's id."""
    st = cpstore.open(path)
    cid = st.recorder("r").checkpoint(0, {"a": 1})
    opened, release = threading.Event(), threading.Event()

    def reader() -> None:
        with st.read(cid):
            opened.set()
            release.wait(30)

    thread = threading.Thread(target=reader)
    thread.start()
    assert opened.wait(30)
    with pytest.raises(StoreError, match="left open"):
        st.close()
    release.set()
    thread.join(30)
    return cid


@pytest.mark.parametrize(
    "options", [{"durability": "none"}, {"readonly": True, "create": False}], ids=["none", "ro"]
)
def test_a_store_left_open_opens_with_another_mode_once_its_txn_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: dict[str, object]
) -> None:
    monkeypatch.setattr(lmdb_txns, "CLOSE_WAIT_SECONDS", 0.5)
    path = str(tmp_path / "s")
    cid = _left_open(path)
    with cpstore.open(path, **options) as again:  # type: ignore[arg-type]  # before: refused
        assert again.ref("r") == cid


def test_a_store_left_open_compacts_once_its_txn_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(lmdb_txns, "CLOSE_WAIT_SECONDS", 0.5)
    path = str(tmp_path / "s")
    cid = _left_open(path)
    compact_store(path)  # before: "close the store in this process before compacting it"
    with cpstore.open(path, readonly=True, create=False) as ro:
        assert ro.ref("r") == cid
        assert ro.verify().ok


_FORK = r"""
import os, sys, threading
import cpstore
from cpstore.errors import StoreError
from cpstore.store import lmdb_txns
lmdb_txns.CLOSE_WAIT_SECONDS = 0.5
path = sys.argv[1]
st = cpstore.open(path)
cid = st.recorder("r").checkpoint(0, {"a": 1})
opened, release = threading.Event(), threading.Event()
def reader():
    with st.read(cid):
        opened.set()
        release.wait(30)
t = threading.Thread(target=reader)
t.start()
opened.wait(30)
try:
    st.close()
except StoreError as exc:
    print("left open", "left open" in str(exc), flush=True)
release.set()
t.join(30)
pid = os.fork()
if pid == 0:
    try:
        with cpstore.open(path) as child:
            child.recorder("r").checkpoint(1, {"a": 2})
            print("child wrote", flush=True)
    except BaseException as exc:
        print("child", type(exc).__name__, exc, flush=True)
    os._exit(0)
_, status = os.waitpid(pid, 0)
print("child status", status, flush=True)
"""


def test_a_fork_child_opens_a_store_its_parent_left_open(tmp_path: Path) -> None:
    path = str(tmp_path / "s")
    out = run_script(_FORK, path)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
    lines = out.stdout.splitlines()
    assert lines[0] == "left open True", lines
    assert "child wrote" in lines, lines  # before: child ForkError
    assert "child status 0" in lines, lines
    with cpstore.open(path, readonly=True, create=False) as ro:
        assert [m.step for m in ro.history("r")] == [1, 0]
