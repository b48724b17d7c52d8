"""The chaos test's compactor process (tests/test_chaos_mutations.py, the compaction variant).

Light on imports (cpstore and the log only, no LangGraph), so it starts
compacting soon after it is spawned, also on a loaded machine.
"""

from __future__ import annotations

import os
import random
import time
import traceback

from chaos_worker import Log

from cpstore.errors import CpstoreError, IntegrityError
from cpstore.store import compact_store


def compactor(store: str, logdir: str, inc: int, deadline: float) -> None:
    """The compaction variant's compactor: ``compact_store`` again and again until the deadline.

    Refused (StoreError) while any worker has the store open or when one committed
    after its verify; an IntegrityError or a non-CpstoreError is a defect.
    """
    rng = random.Random(f"compact/{inc}")
    log = Log(os.path.join(logdir, "w90.log"), 90, inc)
    log.write("start", sync=True, pid=os.getpid())
    while time.monotonic() < deadline:
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
