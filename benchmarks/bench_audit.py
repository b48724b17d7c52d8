"""What reading a long audit log costs: a scan of every record, and a retention sweep.

A retention sweep that removes checkpoints must name those a decision, sign-off or
gate names. It once read the whole audit log for that in its write txn; it now asks
the audited-checkpoint index one key per removed checkpoint (``audit.audited_among``)
and reads the log only to catch the index up (a store written before it, or records an
older cpstore appended). ``audit_records`` readers still read every record; each is
decoded and its canonical form checked by re-encoding it. This interleaves:

- ``audit scan``: ``store.audit_records()`` over the whole log (the canonical check
  made by the fast encoder, ``fast_canonical.decode_fast``), against the same scan
  with the specification's encoder (``canonical.decode_value``, the pure-Python
  reference) and against the raw limit: an LMDB cursor over the audit table with one
  ``msgpack.unpackb`` per record and no checks;
- ``gc dry run``: ``store.gc(keep_last=1, dry_run=True)`` over a run of 20
  checkpoints beside the long log (a dry run changes nothing, so every repeat does the
  same work), against the same dry run on a copy of the store without the index rows
  (``index absent``: the catch-up reads the whole log, as every sweep once did; the dry
  run rolls it back, so every repeat reads it again) and against the raw scan of the log.

Run: ``.venv/bin/python -m pytest benchmarks/bench_audit.py --benchmark-only -s``
(``CPSTORE_BENCH_SIZE=full``: 20,000 records; quick: 2,000).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import lmdb
import msgpack
import pytest
from bench_store import Comparison, _timer, interleave
from pytest_benchmark.fixture import BenchmarkFixture

import cpstore
from cpstore.native import fast_canonical
from cpstore.native.canonical import decode_value
from cpstore.store import audit
from cpstore.store.audit_named import AUDITED_INDEXED, AUDITED_PREFIX

RUN = "r"


@pytest.fixture(scope="module")
def repeats(size: str) -> int:
    """Interleaved repeats per figure (at least 5)."""
    return max(5, int(os.environ.get("CPSTORE_BENCH_REPEATS", "5" if size == "quick" else "11")))


@pytest.fixture(scope="module")
def records(size: str) -> int:
    """Audit records in the log."""
    return int(os.environ.get("CPSTORE_BENCH_AUDIT", "2000" if size == "quick" else "20000"))


@pytest.fixture(scope="module")
def store_path(records: int) -> Iterator[str]:
    """A store with a run of 20 checkpoints and ``records`` decision-shaped audit records."""
    path = str(Path(tempfile.mkdtemp(prefix="cpstore-bench-audit-")) / "s")
    with cpstore.open(path, durability="none") as store:
        rec = store.recorder(RUN)
        ids = [rec.checkpoint(step, {"step": step, "text": "x" * 200}) for step in range(20)]
        for i in range(records):
            body = {
                "decision_id": f"{i:032x}",
                "recorded": {"checkpoint_id": ids[i % 20], "run_id": RUN, "step": i % 20},
                "replayed": {"checkpoint_id": ids[(i + 1) % 20], "run_id": RUN},
                "findings": [{"code": "STATE_MISMATCH", "at": i, "detail": "y" * 40}],
                "verdict": "REJECT",
            }
            store.append_audit("decision", body)
    yield path


@pytest.fixture(scope="module")
def unindexed_path(store_path: str) -> str:
    """A copy of the store without the audited-checkpoint index (as an older cpstore left it)."""
    path = str(Path(store_path).parent / "unindexed")
    shutil.copytree(store_path, path)
    env = lmdb.open(path, max_dbs=16)
    meta = env.open_db(b"meta", create=False)
    with env.begin(write=True, db=meta) as txn:
        keys = [bytes(k) for k, _ in txn.cursor() if bytes(k).startswith(AUDITED_PREFIX)]
        for key in [*keys, AUDITED_INDEXED]:
            txn.delete(key)
    env.close()
    return path


@pytest.fixture(scope="module")
def raw_env(store_path: str) -> Iterator[lmdb.Environment]:
    """The store's files opened bare (no lock file: nothing of cpstore's is shared)."""
    env = lmdb.open(store_path, readonly=True, lock=False, max_dbs=16)
    yield env
    env.close()


def _raw_scan(env: lmdb.Environment) -> int:
    """Every audit record's bytes through one ``msgpack.unpackb``: no chain or form check."""
    table = env.open_db(b"audit", create=False)
    n = 0
    with env.begin(db=table, buffers=True) as txn:
        for _, value in txn.cursor():
            msgpack.unpackb(value, raw=False, strict_map_key=False)
            n += 1
    return n


def test_audit_scan(
    benchmark: BenchmarkFixture,
    store_path: str,
    raw_env: lmdb.Environment,
    records: int,
    repeats: int,
) -> None:
    """Per-record time of a whole-log scan: fast canonical check, reference check, raw."""
    store = cpstore.open(store_path, readonly=True)
    fast = fast_canonical.decode_fast

    def scan(decode: object) -> None:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(audit, "decode_fast", decode)
            if sum(1 for _ in store.audit_records()) != records:
                raise AssertionError("the scan missed records")

    try:
        interleave(
            benchmark,
            "audit scan",
            {
                "cpstore": _timer(lambda: scan(fast)),
                "reference check": _timer(lambda: scan(decode_value)),
                "raw msgpack": _timer(lambda: _raw_scan(raw_env)),
            },
            repeats,
            [
                Comparison("cpstore", "reference check", note="the pure-Python spec's re-encode"),
                Comparison("cpstore", "raw msgpack", note="raw limit: no chain or form check"),
            ],
            items=records,
        )
    finally:
        store.close()


def test_gc_dry_run_beside_a_long_audit_log(
    benchmark: BenchmarkFixture,
    *,
    store_path: str,
    unindexed_path: str,
    raw_env: lmdb.Environment,
    records: int,
    repeats: int,
) -> None:
    """One sweep (dry run) of a 20-checkpoint run: indexed, index absent, one raw scan."""
    store = cpstore.open(store_path)
    unindexed = cpstore.open(unindexed_path)

    def sweep(st: cpstore.Store) -> None:
        report = st.gc(keep_last=1, run_id=RUN, dry_run=True)
        if len(report.checkpoints) != 19 or len(report.decided) != 19:
            raise AssertionError(report)

    try:
        interleave(
            benchmark,
            f"gc dry run, {records} audit records",
            {
                "cpstore": _timer(lambda: sweep(store)),
                "index absent": _timer(lambda: sweep(unindexed)),
                "raw msgpack scan": _timer(lambda: _raw_scan(raw_env)),
            },
            repeats,
            [
                Comparison("cpstore", "index absent", note="the catch-up: a read of the log"),
                Comparison("cpstore", "raw msgpack scan", note="raw limit: one unchecked scan"),
            ],
        )
    finally:
        unindexed.close()
        store.close()
