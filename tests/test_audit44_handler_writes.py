"""audit44: a signal handler's checkpoint or close inside a batched write of the same store,
on PostgreSQL as on LMDB (docs/durability.md: refused with ReentrantWriteError, and the
interrupted write goes on).

Before, on PostgreSQL (which had no per-thread "inside a write" mark, only the writer-lock
one of its txns):

- a handler's ``checkpoint()`` landing while its thread was in a batched ``checkpoint()``
  holding the queue's lock waited for that lock for ever (a SIGTERM handler saving a last
  checkpoint hung the process);
- a handler's ``close()`` landing inside a flush raised ReentrantWriteError to the handler
  but closed the handle (and its pool) all the same: every later call of the program,
  which was told the close was refused, raised StoreClosedError.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

#: The handler runs ``inside`` (checkpoint: landing in commit() under the queue's lock, at
#: the owners' note of the queued write; close: landing in the flush's apply). Prints what
#: the handler was told, whether the handle is open, and which runs the store holds.
_SCRIPT = """
import os, signal, sys
import cpstore
from cpstore.store.batch_owners import BatchOwners
from cpstore.store.lmdb_backend import LmdbBackend
from cpstore.store.pg_backend import PgBackend
where, inside = sys.argv[1], sys.argv[2]
st = cpstore.open(where, durability="batched", batch_size=1000)
spare = st.recorder("h")
told = []

def handler(signum, frame):
    try:
        if inside == "checkpoint":
            spare.checkpoint(0, {"h": 0})
        else:
            st.close()
        told.append("ok")
    except cpstore.CpstoreError as exc:
        told.append(type(exc).__name__)

signal.signal(signal.SIGUSR1, handler)
armed = [True]
if inside == "checkpoint":
    real_queued = BatchOwners.queued

    def queued(self, op):
        if armed[0]:
            armed[0] = False
            os.kill(os.getpid(), signal.SIGUSR1)  # the handler runs at the next bytecode
            for _ in range(1000):  # still under the queue's lock
                pass
        return real_queued(self, op)

    BatchOwners.queued = queued
else:
    cls, name = (PgBackend, "_apply_all") if "://" in where else (LmdbBackend, "_apply")
    real_apply = getattr(cls, name)

    def apply(self, txn, ops):
        if armed[0]:
            armed[0] = False
            os.kill(os.getpid(), signal.SIGUSR1)
            for _ in range(1000):
                pass
        return real_apply(self, txn, ops)

    setattr(cls, name, apply)
rec = st.recorder("r")
for i in range(5):
    rec.checkpoint(i, {"r": i})
st.flush()
print(",".join(told), "closed" if st._backend.closed else "open", flush=True)
print(st.ref("r") is not None, st.ref("h") is not None, flush=True)
st.close()
"""


@pytest.mark.parametrize("inside", ["checkpoint", "close"])
@pytest.mark.parametrize("backend", ["lmdb", "postgresql"])
def test_a_handlers_checkpoint_or_close_inside_a_batched_write_is_refused(
    backend: str,
    inside: str,
    tmp_path: Path,
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    """Before, PostgreSQL: checkpoint hung (the subprocess timed out); close printed
    'ReentrantWriteError closed' and ``st.ref`` raised StoreClosedError."""
    where = str(tmp_path / "s") if backend == "lmdb" else pg_url
    done = subprocess.run(
        [sys.executable, "-c", _SCRIPT, where, inside],
        capture_output=True,
        text=True,
        timeout=120,  # before: the handler's checkpoint waited for ever
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["ReentrantWriteError", "open", "True", "False"]
