"""A close of the store while another thread copies it (copy_store) waits for the copy.

LMDB's copy reads through a txn of its own with the GIL released, which the close's
wait for other threads' txns (EnvTxns.quiesced) did not count: the close freed the
environment under the copy and the process died of SIGSEGV (audit49). The copy is now
counted as a read (EnvTxns.held_open): the close waits for it (at most 5 s, then leaves
the environment open) and the copy completes, verified.
"""

from __future__ import annotations

from pathlib import Path

from script_run import run_script

_SCRIPT = r"""
import os, sys, threading, time
import cpstore
from cpstore.store import copy_store, lmdb_copy
path, dest = sys.argv[1], sys.argv[2]
st = cpstore.open(path, durability="none")
rec = st.recorder("r")
for i in range(60):  # ~100 MB of incompressible values: the copy takes a while
    rec.checkpoint(i, {"blob": os.urandom(1 << 20).hex()})
st.close()
st = cpstore.open(path)
starting = threading.Event()
check = lmdb_copy._check_dest
def check_dest(where):
    check(where)
    starting.set()  # LMDB's copy begins next
lmdb_copy._check_dest = check_dest
got = []
def copy():
    try:
        report = copy_store(st, dest)
        got.append(f"ok {report.ok}")
    except BaseException as exc:
        got.append(f"{type(exc).__name__}: {exc}")
t = threading.Thread(target=copy)
t.start()
assert starting.wait(60)
time.sleep(0.02)
try:
    st.close()
    print("close ok", flush=True)
except BaseException as exc:
    print("close", type(exc).__name__, exc, flush=True)
t.join()
print("copy", got[0], flush=True)
"""


def test_a_close_beside_another_threads_copy_waits_for_it(tmp_path: Path) -> None:
    out = run_script(_SCRIPT, str(tmp_path / "s"), str(tmp_path / "copy"), timeout=300)
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr[-2000:])  # before: -11
    lines = out.stdout.splitlines()
    assert "close ok" in lines, lines
    assert "copy ok True" in lines, lines
