"""Batched flushes on PostgreSQL interrupted inside psycopg's own frames.

tests/test_batched_interrupts.py interrupts a flush on each of its function entries
but skips every entry with psycopg's code on the stack. Here the k-th function entry
*inside* psycopg (with psycopg on the stack: the pipeline, the cursor, the pool,
libpq's wrappers, as called by cpstore's PostgreSQL backend) raises KeyboardInterrupt,
while thread B's checkpoint is queued; then B flushes. The documented outcome
(docs/durability.md "batched"):

* B's flush never waits for ever, and what it says of B's checkpoint is true: "stored"
  only for a stored one, "not stored" never for one that is (OutcomeUnknownError, or a
  StoreConnectionError saying "may or may not be stored", may go either way);
* the interrupted handle stays usable or refuses clearly: the next commit on it either
  stores its checkpoint or raises a CpstoreError (never hangs, never another error),
  and the one after that stores;
* nothing acknowledged is lost: every checkpoint a flush acknowledged is still the
  head of its run at the end.

CI sweeps every ``STRIDE``-th psycopg entry from a random offset (printed; set
``CPSTORE_PSYCOPG_SWEEP_OFFSET`` to replay); ``CPSTORE_SOAK=1`` (or
``CPSTORE_PSYCOPG_SWEEP=full``) sweeps every entry.
"""

from __future__ import annotations

import functools
import gc
import os
import queue
import random
import sys

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from test_batched_threads import JobThread
from trace_interrupts import in_psycopg, interrupting

import cpstore
from cpstore.errors import CpstoreError, OutcomeUnknownError, StoreConnectionError

FULL = bool(os.environ.get("CPSTORE_SOAK")) or os.environ.get("CPSTORE_PSYCOPG_SWEEP") == "full"
STRIDE = 1 if FULL else 25


def _unknown(told: object) -> bool:
    """An outcome the caller must read back: either way is true."""
    return isinstance(told, OutcomeUnknownError) or (
        isinstance(told, StoreConnectionError) and "may or may not" in str(told)
    )


def check_an_interrupt_inside_psycopg_keeps_the_batched_contract(
    url: str, *, stride: int, offset: int
) -> int:
    """Sweep k = offset+1, offset+1+stride, ... until a flush runs through; the number
    of interrupts that landed."""
    st = cpstore.open(url, durability="batched", batch_size=10_000)
    b, a = JobThread(), JobThread()  # A: the interrupted thread's next commits
    problems: list[str] = []
    acked: dict[str, str] = {}  # run -> the checkpoint a flush acknowledged
    landed_n = 0
    refused: list[str] = []  # a later commit's one clear refusal (documented: allowed)
    for k in range(offset + 1, 100_000, stride):
        run = f"b{k}"
        cid = b.run(functools.partial(st.recorder(run).checkpoint, 1, {"k": k}))
        trace, landed = interrupting(k, in_psycopg)
        gc.disable()  # collector off while hooked: tests/trace_interrupts.py
        sys.settrace(trace)
        try:
            st.flush()
        except KeyboardInterrupt:
            pass
        except CpstoreError as exc:
            if not landed:
                problems.append(f"k={k}: a flush nothing interrupted raised {exc!r}")
        finally:
            sys.settrace(None)
            gc.enable()
        try:
            told = b.run(st.flush, timeout=60)
        except queue.Empty:
            pytest.fail(f"interrupt at {landed}: B's flush waits for ever")
        stored = st.ref(run) == cid
        if told is None:
            if stored:
                acked[run] = cid
            else:
                problems.append(f"{landed}: B told stored, not stored")
        elif isinstance(told, CpstoreError):
            if stored and not _unknown(told):
                problems.append(f"{landed}: B told not stored ({told!r}), stored")
        else:
            problems.append(f"{landed}: B got {told!r}")
        # The interrupted handle afterwards: usable, or one clear refusal then usable.
        for attempt in (0, 1):
            probe = f"a{k}.{attempt}"
            rec = st.recorder(probe)
            try:
                pcid = a.run(functools.partial(rec.checkpoint, 1, {"p": k}), timeout=60)
                ptold = a.run(st.flush, timeout=60)
            except queue.Empty:
                pytest.fail(f"interrupt at {landed}: a later commit waits for ever")
            if isinstance(pcid, CpstoreError):
                ptold = pcid
            if ptold is None and st.ref(probe) == pcid:
                acked[probe] = pcid
                break
            if ptold is None:
                problems.append(f"{landed}: a later commit told stored, not stored")
                break
            if not isinstance(ptold, CpstoreError):
                problems.append(f"{landed}: a later commit got {ptold!r}")
                break
            if attempt == 1:
                problems.append(f"{landed}: two later commits refused: {ptold!r}")
            else:
                refused.append(f"{landed}: {ptold!r}"[:200])
        if landed:
            landed_n += 1
        else:
            break  # the flush ran through: every planned entry was tried
    lost = [run for run, cid in acked.items() if st.ref(run) != cid]
    st.close()
    b.stop()
    a.stop()
    print(f"later commits refused once: {len(refused)} {refused[:5]}")
    assert not problems, problems[:20]
    assert not lost, f"acknowledged checkpoints lost: {lost[:10]}"
    return landed_n


def test_an_interrupt_inside_psycopg_keeps_the_batched_contract(
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    """PostgreSQL: an interrupt on psycopg's function entries (every STRIDE-th in CI,
    all with CPSTORE_SOAK=1) keeps the batched contract and leaves the handle usable."""
    given = os.environ.get("CPSTORE_PSYCOPG_SWEEP_OFFSET")
    offset = int(given) if given else random.SystemRandom().randrange(STRIDE)
    print(f"psycopg sweep stride={STRIDE} offset={offset}")
    landed = check_an_interrupt_inside_psycopg_keeps_the_batched_contract(
        pg_url, stride=STRIDE, offset=offset
    )
    print(f"{landed} psycopg entries interrupted")
    assert landed * STRIDE > 300, landed  # a flush has ~700 psycopg entries: they were swept
