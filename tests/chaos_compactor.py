"""The chaos test's compactor process and its clock (tests/test_chaos_mutations.py).

:func:`compactor` runs ``compact_store`` again and again (the compaction
variant). :func:`deadline` is every process's end of the run: the test writes
it (:func:`set_deadline`) once the first processes are ready, so a start slowed
by a loaded machine does not eat the run (10 s of a CI run were once all
start-up, with no checkpoint and no kill).
"""

from __future__ import annotations

import os
import random
import time
import traceback

from chaos_log import Log

from cpstore.errors import CpstoreError, IntegrityError
from cpstore.store import compact_store


def set_deadline(logdir: str, at: float) -> None:
    """Publish the run's end (``time.monotonic()``, one clock for every process on Linux)."""
    tmp = os.path.join(logdir, "deadline.tmp")
    with open(tmp, "w") as f:
        f.write(repr(at))
    os.replace(tmp, os.path.join(logdir, "deadline"))


def deadline(logdir: str, log: Log) -> float:
    """Say this process is ready (``ready``), then wait for the run's end to be published."""
    log.write("ready", sync=True)
    path = os.path.join(logdir, "deadline")
    give_up = time.monotonic() + 600
    while not os.path.exists(path):
        if time.monotonic() > give_up:
            raise TimeoutError("the test never published the run's deadline")
        time.sleep(0.05)
    with open(path) as f:
        return float(f.read())


def compactor(store: str, logdir: str, inc: int) -> None:
    """The compaction variant's compactor: ``compact_store`` again and again until the deadline.

    Refused (StoreError) while any worker has the store open or when one committed
    after its verify; an IntegrityError or a non-CpstoreError is a defect.
    """
    rng = random.Random(f"compact/{inc}")
    log = Log(os.path.join(logdir, "w90.log"), 90, inc)
    log.write("start", sync=True, pid=os.getpid())
    end = deadline(logdir, log)
    while time.monotonic() < end:
        oid = log.op()
        log.write("b", sync=True, op="compact", id=oid)
        try:
            rep = compact_store(store)
        except CpstoreError as exc:
            log.write("x", sync=True, op="compact", id=oid, err=type(exc).__name__,
                      msg=str(exc)[:300])  # fmt: skip
            if isinstance(exc, IntegrityError):
                log.write("defect", sync=True, op="compact", err="IntegrityError",
                          tb=traceback.format_exc()[-2000:])  # fmt: skip
        except BaseException as exc:
            log.write("defect", sync=True, op="compact", err=type(exc).__name__,
                      tb=traceback.format_exc()[-2000:])  # fmt: skip
            raise
        else:
            log.write("a", sync=True, op="compact", id=oid, before=rep.bytes_before,
                      after=rep.bytes_after, counts=rep.counts)  # fmt: skip
        time.sleep(rng.uniform(0.0, 0.05))
    log.write("end", sync=True)
