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
  run commits it, so each repeat removes the rows first, untimed) and against the raw
  scan of the log;

- ``resume gate`` / ``sign-off``: ``resume_gate(..., sign_off=)`` with a fresh sign-off,
  and ``sign_off`` of a fresh QUARANTINE decision (each prepared untimed) beside the
  long log, against the same call on a copy of the store whose audit indexes were
  removed before the call (untimed; the call's append catches them up: one read of
  the log) and against the raw scan of the log (the old "used?" check read every
  ``gate`` record, "signed off?" every ``signoff`` after the decision).

- ``permit use`` / ``certify rollback`` / ``decision by prefix``: ``check_resume`` with a
  permit given before the long log, ``certify_rollback`` of a fresh strict ACCEPT, and
  ``_decision_by_name`` of a 12-character decision id prefix (gate index v2), against
  the same call with the view's method replaced by the full scan it replaced (the
  reference twin: every ``resume`` record after the gate, every ``decision`` record).

Run: ``.venv/bin/python -m pytest benchmarks/bench_audit.py --benchmark-only -s``
(``CPSTORE_BENCH_SIZE=full``: 20,000 records; quick: 2,000).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import lmdb
import msgpack
import pytest
from bench_store import Comparison, _timed, _timer, interleave
from pytest_benchmark.fixture import BenchmarkFixture

import cpstore
from cpstore.decision import gate_reads
from cpstore.decision.gates import certify_rollback, check_resume, resume_gate, sign_off
from cpstore.native import fast_canonical
from cpstore.native.canonical import decode_value
from cpstore.run.model import Observation, PackedTokens, ReplayMode, Run
from cpstore.store import audit, audit_read
from cpstore.store.audit_gates import GATES_INDEXED, SIGNED_PREFIX, USED_PREFIX
from cpstore.store.audit_named import AUDITED_INDEXED, AUDITED_PREFIX
from cpstore.store.audit_permits import ODD_ID_PREFIX, PERMIT_PREFIX, QUARANTINE_PREFIX
from cpstore.store.model import AuditRecord

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
            patch.setattr(audit_read, "decode_fast", decode)
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


def _strip(store: cpstore.Store, prefixes: tuple[bytes, ...], counts: tuple[bytes, ...]) -> None:
    """Remove index rows (as a store an older cpstore wrote has none)."""
    meta = store.backend.dbs["meta"]

    def run(txn: object) -> None:
        with txn.cursor(db=meta) as cur:  # type: ignore[attr-defined]
            keys = [bytes(k) for k, _ in cur if bytes(k).startswith(prefixes)]
        for key in [*keys, *counts]:
            txn.delete(key, db=meta)  # type: ignore[attr-defined]

    store.backend.write_txn(run)


_AUDITED = ((AUDITED_PREFIX,), (AUDITED_INDEXED,))
_GATES = (
    (SIGNED_PREFIX, USED_PREFIX, PERMIT_PREFIX, QUARANTINE_PREFIX, ODD_ID_PREFIX),
    (GATES_INDEXED,),
)


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

    def absent() -> float:
        _strip(unindexed, *_AUDITED)  # the dry run commits its catch-up: remove it again
        return _timed(lambda: sweep(unindexed))

    try:
        interleave(
            benchmark,
            f"gc dry run, {records} audit records",
            {
                "cpstore": _timer(lambda: sweep(store)),
                "index absent": absent,
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


def _released(store: cpstore.Store, run: str) -> tuple[str, str]:
    """A new checkpoint and its QUARANTINE decision's id (untimed preparation)."""
    rec = store.recorder(run)
    rec.observe(1, "clock", b"t", pinned_at=1.0)
    rec.token("rng", 1)
    cid = str(rec.checkpoint(1, b"state"))
    rec.close()
    with store.read(cid) as cp:
        m = cp.manifest
        replay = Run(
            m.run_id,
            m.step,
            m.state_digest,
            tokens=PackedTokens(bytes(cp.tokens()), values=[cp.token(0)[3]]),
            observations=tuple(Observation(*o) for o in cp.observations()),
            mode=ReplayMode.BEST_EFFORT,
            transcript_digest=m.transcript_digest,
        )
    decision = cpstore.validate(cid, replay, store=store)
    if decision.verdict.name != "QUARANTINE":
        raise AssertionError(decision)
    return cid, decision.id


@pytest.fixture(scope="module")
def gate_paths(store_path: str) -> tuple[str, str]:
    """Two copies of the long-log store: one kept indexed, one stripped before each call."""
    base = Path(store_path).parent
    paths = (str(base / "gates-indexed"), str(base / "gates-absent"))
    for path in paths:
        shutil.copytree(store_path, path)
    return paths


@pytest.mark.parametrize("call", ["resume gate", "sign-off"])
def test_gate_beside_a_long_audit_log(
    benchmark: BenchmarkFixture,
    *,
    call: str,
    gate_paths: tuple[str, str],
    raw_env: lmdb.Environment,
    records: int,
    repeats: int,
) -> None:
    """One resume gate with a sign-off, or one sign-off: indexed, index absent, one raw scan."""
    indexed = cpstore.open(gate_paths[0], durability="none")
    absent = cpstore.open(gate_paths[1], durability="none")
    made = [0]

    def contender(store: cpstore.Store, strip: bool) -> Callable[[], float]:
        def run() -> float:
            made[0] += 1
            cid, decision = _released(store, f"{call}-{made[0]}")
            if call == "resume gate":
                so = sign_off(store, decision, operator="op", reason="bench").audit_digest
            if strip:
                _strip(store, *_GATES)
                _strip(store, *_AUDITED)
            if call == "resume gate":
                return _timed(lambda: resume_gate(store, cid, decision, sign_off=so))
            return _timed(lambda: sign_off(store, decision, operator="op", reason="bench"))

        return run

    try:
        interleave(
            benchmark,
            f"{call}, {records} audit records",
            {
                "cpstore": contender(indexed, strip=False),
                "index absent": contender(absent, strip=True),
                "raw msgpack scan": _timer(lambda: _raw_scan(raw_env)),
            },
            repeats,
            [
                Comparison("cpstore", "index absent", note="the catch-up: a read of the log"),
                Comparison("cpstore", "raw msgpack scan", note="raw limit: one unchecked scan"),
            ],
        )
    finally:
        absent.close()
        indexed.close()


# -- permit use, rollback certification, decision by prefix (gate index v2) ----------------


def _scan_permit_use(view: audit.AuditView, gate: AuditRecord) -> AuditRecord | None:
    """The reference twin: ``_use_permit``'s old scan of the resume records after the gate."""
    for used in view.audit_records(kind="resume", start=gate.index + 1):
        if used.body.get("permit") == gate.digest:
            return used
    return None


def _scan_quarantine(view: audit.AuditView, rec: AuditRecord) -> AuditRecord | None:
    """The reference twin: ``certify_rollback``'s old search of every decision record."""
    recorded = rec.body.get("recorded") or {}
    pair = (recorded.get("run_id"), recorded.get("branch"))
    for r in view.audit_records(kind="decision"):
        other = r.body.get("recorded") or {}
        if (other.get("run_id"), other.get("branch")) == pair and r.body.get(
            "verdict"
        ) == "QUARANTINE":
            return r
    return None


def _scan_prefix(view: audit.AuditView, low: str) -> list[AuditRecord]:
    """The reference twin: ``_decision_by_name``'s old read of every decision record."""
    return [
        r
        for r in view.audit_records(kind="decision")
        if str(r.body.get("decision_id", "")).startswith(low) or r.digest.startswith(low)
    ]


_TWINS = {
    "permit use": ("permit_use", _scan_permit_use),
    "certify rollback": ("branch_quarantine", _scan_quarantine),
    "decision by prefix": ("decisions_by_prefix", _scan_prefix),
}


@pytest.fixture(scope="module")
def permit_log(records: int, repeats: int) -> Iterator[tuple[str, list[tuple[str, str, str]]]]:
    """A store whose permits (two per repeat) were given before ``records`` decision records:
    a permit used long after it was given (the old check read every record after it)."""
    path = str(Path(tempfile.mkdtemp(prefix="cpstore-bench-permits-")) / "s")
    permits = []
    with cpstore.open(path, durability="none") as store:
        for i in range(2 * repeats + 2):
            run = f"permit-{i}"
            cid, decision = _released(store, run)
            so = sign_off(store, decision, operator="op", reason="bench")
            permits.append((run, cid, resume_gate(store, cid, decision, sign_off=so).audit_digest))
        for i in range(records):
            body = {  # ids spread as validate()'s digests are: a 12-character prefix is unique
                "decision_id": f"{i * 0x9E3779B97F4A7C15F39CC0605CEDC835 % 2**128:032x}",
                "recorded": {"checkpoint_id": "00" * 16, "run_id": RUN, "step": i % 20},
                "findings": [{"code": "STATE_MISMATCH", "at": i, "detail": "y" * 40}],
                "verdict": "REJECT",
            }
            store.append_audit("decision", body)
    yield path, permits


@pytest.mark.parametrize("call", list(_TWINS))
def test_gate_path_against_its_full_scan_twin(
    benchmark: BenchmarkFixture,
    *,
    call: str,
    permit_log: tuple[str, list[tuple[str, str, str]]],
    records: int,
    repeats: int,
) -> None:
    """A permit's use, a rollback certification or a decision found by an operator's prefix
    beside the long log: the gate index against the full scan it replaced (same store)."""
    path, permits = permit_log
    store = cpstore.open(path, durability="none")
    method, twin = _TWINS[call]
    made = [0]
    with store.audit_view() as view:
        target = next(view.audit_records(kind="decision", start=records // 2, limit=1))
    prefix = str(target.body["decision_id"])[:12]

    def one() -> float:
        made[0] += 1
        if call == "permit use":
            run, cid, permit = permits.pop()
            return _timed(
                lambda: check_resume(store, cid, run_id=run, branch="main", permit=permit)
            )
        if call == "certify rollback":
            rec = store.recorder(f"cert-{made[0]}")
            rec.token("rng", 1)
            cid = str(rec.checkpoint(1, b"state"))
            rec.close()
            with store.read(cid) as cp:
                m = cp.manifest
                replay = Run(
                    m.run_id,
                    m.step,
                    m.state_digest,
                    tokens=PackedTokens(bytes(cp.tokens()), values=[cp.token(0)[3]]),
                    mode=ReplayMode.STRICT,
                    transcript_digest=m.transcript_digest,
                )
            decision = cpstore.validate(cid, replay, store=store)
            return _timed(lambda: certify_rollback(store, cid, decision))

        def lookup() -> None:
            with store.audit_view() as view:
                found = gate_reads._decision_by_name(view, prefix)
                if [r.digest for r in found] != [target.digest]:
                    raise AssertionError("the prefix lookup missed its decision")

        return _timed(lookup)

    def scanned() -> float:
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(audit.AuditView, method, twin)
            return one()

    try:
        interleave(
            benchmark,
            f"{call}, {records} audit records",
            {"cpstore": one, "full scan (reference twin)": scanned},
            repeats,
            [Comparison("cpstore", "full scan (reference twin)", note="the scan it replaced")],
        )
    finally:
        store.close()
