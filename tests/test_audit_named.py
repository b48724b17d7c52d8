"""The audited-checkpoint index: a sweep names exactly what a full scan of the log names."""

from __future__ import annotations

import multiprocessing
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import (  # noqa: F401 - fixtures
    backend_url,
    pg_cluster,
    pg_url,
)

import cpstore
from cpstore.errors import AuditChainError
from cpstore.native.canonical import decode_value, encode_value
from cpstore.store import audit, audit_read
from cpstore.store.audit_named import AUDITED_INDEXED, AUDITED_PREFIX, named_count
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store

RUNS = ("a", "b", "c")


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with open_store(url) as st:
        yield st


def full_scan(store: Store) -> set[str]:
    """What the sweep once computed by reading every record (``_audited_checkpoints``)."""
    named: set[str] = set()
    for rec in store.audit_records():
        body: dict[str, Any] = rec.body
        if rec.kind == "decision":
            for side in ("recorded", "replayed"):
                sub = body.get(side)
                if isinstance(sub, dict) and isinstance(sub.get("checkpoint_id"), str):
                    named.add(sub["checkpoint_id"])
        elif rec.kind in ("signoff", "gate", "resume") and isinstance(
            body.get("checkpoint_id"), str
        ):
            named.add(body["checkpoint_id"])
    return named


def _name(rng: random.Random, ids: list[str]) -> dict[str, Any]:
    """A ``checkpoint_id`` field: mostly a real id, sometimes one that names nothing."""
    cid = rng.choice(ids)
    pick = rng.random()
    if pick < 0.7:
        return {"checkpoint_id": cid}
    if pick < 0.8:
        return {"checkpoint_id": cid.upper()}
    if pick < 0.9:
        return {"checkpoint_id": cid[:31]}
    return {} if pick < 0.95 else {"checkpoint_id": 7}


def _random_record(store: Store, rng: random.Random, ids: list[str]) -> None:
    kind = rng.choice(["decision", "decision", "signoff", "gate", "resume", "note", "gc"])
    if kind == "decision":
        body: dict[str, Any] = {"verdict": "ACCEPT"}
        for side in ("recorded", "replayed"):
            if rng.random() < 0.8:
                body[side] = _name(rng, ids) if rng.random() < 0.9 else "not a map"
    else:
        body = _name(rng, ids)
    store.append_audit(kind, body)


def _sweep_matches_the_scan(
    store: Store, rng: random.Random, runs: list[str], dry_run: bool
) -> None:
    """One random gc: its ``decided`` and its gc record are what the full scan says."""
    before = full_scan(store)
    gcs = len(list(store.audit_records(kind="gc")))
    run = rng.choice([*runs, None])
    report = store.gc(keep_last=rng.randint(1, 3), run_id=run, dry_run=dry_run)
    expected = tuple(c for c in report.checkpoints if c in before)
    assert report.decided == expected
    records = [r.body for r in store.audit_records(kind="gc")]
    if dry_run or not expected:
        assert len(records) == gcs
    else:
        assert len(records) == gcs + 1 and records[-1]["decided"] == list(expected)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sweeps_name_exactly_what_the_full_scan_names(store: Store, seed: int) -> None:
    """Random decisions, sign-offs, gates, notes, checkpoints and prunes: every sweep's
    ``decided`` and gc record equal the full scan's answer; verify stays clean."""
    rng = random.Random(seed)
    recorders = {run: store.recorder(run) for run in RUNS}
    steps = dict.fromkeys(RUNS, 0)
    ids = [recorders["a"].checkpoint(0, b"first")]
    steps["a"] = 1
    sweeps = 0
    for _ in range(70):
        event = rng.random()
        if event < 0.45:
            run = rng.choice(RUNS)
            ids.append(recorders[run].checkpoint(steps[run], {"n": len(ids)}))
            steps[run] += 1
        elif event < 0.8:
            _random_record(store, rng, ids)
        else:
            runs = [run for run in RUNS if steps[run]]
            _sweep_matches_the_scan(store, rng, runs, dry_run=rng.random() < 0.3)
            sweeps += 1
    _sweep_matches_the_scan(store, rng, [], dry_run=False)
    assert sweeps > 5
    report = store.verify()
    assert report.ok, report.problems


def _meta_rows(store: Store) -> dict[bytes, bytes]:
    """The index's rows (``audited/…`` and ``audited_indexed``) as the store holds them."""
    meta = store.backend.dbs["meta"]
    rows: dict[bytes, bytes] = {}
    with store.backend.read_txn() as txn, txn.cursor(db=meta) as cur:
        for key, value in cur:
            if bytes(key).startswith(AUDITED_PREFIX) or bytes(key) == AUDITED_INDEXED:
                rows[bytes(key)] = bytes(value)
    return rows


def _rewrite(store: Store, puts: dict[bytes, bytes], deletes: list[bytes]) -> None:
    """Change meta rows behind the index's back (an older cpstore, or damage)."""
    meta = store.backend.dbs["meta"]

    def run(txn: Any) -> None:
        for key in deletes:
            txn.delete(key, db=meta)
        for key, value in puts.items():
            txn.put(key, value, db=meta)

    store.backend.write_txn(run)


def _decided_history(store: Store) -> list[str]:
    """Six checkpoints on run ``a``; decisions name the 2nd and 3rd, a sign-off the 4th."""
    rec = store.recorder("a")
    ids = [rec.checkpoint(i, {"i": i}) for i in range(6)]
    cpstore.validate(ids[1], ids[2], store=store)
    store.append_audit("signoff", {"checkpoint_id": ids[3]})
    for i in range(5):
        store.append_audit("note", {"checkpoint_id": ids[0], "i": i})
    return ids


def test_a_store_without_the_index_catches_up_in_the_sweep(store: Store) -> None:
    """No index rows (a store an older cpstore wrote): the real sweep indexes the log in
    its txn and answers as the log says; verify passes."""
    ids = _decided_history(store)
    _rewrite(store, {}, list(_meta_rows(store)))
    assert _meta_rows(store) == {}
    report = store.gc(keep_last=1, run_id="a")
    assert report.decided == tuple(sorted(ids[1:4]))
    rows = _meta_rows(store)
    count = len(list(store.audit_records()))
    assert decode_value(rows[AUDITED_INDEXED]) == [1, count]
    assert {k[len(AUDITED_PREFIX) :].hex() for k in rows if k != AUDITED_INDEXED} == set(ids[1:4])
    result = store.verify()
    assert result.ok, result.problems


def test_a_dry_run_commits_the_catch_up_once_and_removes_nothing(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A dry run beside an unindexed log commits the indexes' catch-up (one read of the
    log), removes nothing and appends nothing; the next dry run reads no record it
    does not need (its witnesses); both answer as the log says."""
    ids = _decided_history(store)
    _rewrite(store, {}, list(_meta_rows(store)))
    count = len(list(store.audit_records()))
    decoded: list[int] = []
    real = audit_read._decode

    def counted(index: int, raw: Any, where: str) -> Any:
        decoded.append(index)
        return real(index, raw, where)

    for module in (audit, audit_read):  # where records are read, and caught up
        monkeypatch.setattr(module, "_decode", counted)
    dry = store.gc(keep_last=1, run_id="a", dry_run=True)
    assert dry.decided == tuple(sorted(ids[1:4]))
    assert sorted(set(decoded)) == list(range(count))  # the catch-up read the log
    assert decode_value(_meta_rows(store)[AUDITED_INDEXED]) == [1, count]
    decoded.clear()
    again = store.gc(keep_last=1, run_id="a", dry_run=True)
    assert again == dry
    assert len(decoded) == len(dry.decided)  # one witness per decided checkpoint
    assert len(store.history("a")) == 6
    assert len(list(store.audit_records())) == count
    result = store.verify()
    assert result.ok, result.problems


def test_a_lagging_index_or_one_of_another_version_is_caught_up(store: Store) -> None:
    """Records the index does not cover (an older cpstore appended them), or a count row of
    another index version, still give the scan's answer; the sweep leaves the index whole."""
    ids = _decided_history(store)
    rows = _meta_rows(store)
    # Cover only the first record (the decision at 0): the sign-off is in the lag.
    lagging = [k for k in rows if k != AUDITED_INDEXED and decode_value(rows[k]) >= 1]
    assert lagging
    _rewrite(store, {AUDITED_INDEXED: encode_value([1, 1])}, lagging)
    assert store.verify().ok  # a lag is no damage: verify checks the covered records
    dry = store.gc(keep_last=1, run_id="a", dry_run=True)
    assert dry.decided == tuple(sorted(ids[1:4]))
    _rewrite(store, {AUDITED_INDEXED: encode_value([2, 10**6])}, [])
    with store.backend.read_txn() as txn:
        assert named_count(txn, store.backend.dbs["meta"]) == 0
    report = store.gc(keep_last=1, run_id="a")
    assert report.decided == dry.decided
    assert decode_value(_meta_rows(store)[AUDITED_INDEXED]) == [1, len(list(store.audit_records()))]
    result = store.verify()
    assert result.ok, result.problems


def test_verify_reports_a_missing_a_forged_and_a_moved_index_entry(store: Store) -> None:
    """Each damaged row of the index is a named verify problem."""
    ids = _decided_history(store)
    key = AUDITED_PREFIX + bytes.fromhex(ids[1])
    _rewrite(
        store,
        {
            AUDITED_PREFIX + bytes.fromhex(ids[5]): encode_value(0),  # names nothing
            AUDITED_PREFIX + bytes.fromhex(ids[2]): encode_value(1),  # not its first record
        },
        [key],
    )
    problems = store.verify().problems
    places = {(p.what, p.where) for p in problems}
    assert (
        "audited-checkpoint index lacks a checkpoint the audit log names",
        f"meta/audited/{ids[1]}",
    ) in places
    assert (
        "audited-checkpoint index disagrees with the audit log",
        f"meta/audited/{ids[5]}",
    ) in places
    assert (
        "audited-checkpoint index disagrees with the audit log",
        f"meta/audited/{ids[2]}",
    ) in places
    assert len(problems) == 3


def test_a_forged_entry_stops_the_sweep_instead_of_listing_the_checkpoint(store: Store) -> None:
    """An entry whose record does not name the checkpoint is an AuditChainError; nothing swept."""
    ids = _decided_history(store)
    notes = [r.index for r in store.audit_records(kind="note")]
    _rewrite(store, {AUDITED_PREFIX + bytes.fromhex(ids[0]): encode_value(notes[0])}, [])
    with pytest.raises(AuditChainError) as caught:
        store.gc(keep_last=1, run_id="a")
    assert caught.value.where == f"meta/audited/{ids[0]}"
    assert caught.value.got == notes[0]
    assert len(store.history("a")) == 6


def test_after_the_catch_up_a_sweep_decodes_only_its_witnesses(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catch-up reads the unindexed log once; the next sweep decodes one record per
    decided checkpoint (the entry's witness) and none for the rest of the log."""
    rec = store.recorder("a")
    ids = [rec.checkpoint(i, {"i": i}) for i in range(4)]
    for i in range(200):
        store.append_audit("note", {"i": i})
    store.append_audit("gate", {"checkpoint_id": ids[1]})
    _rewrite(store, {}, list(_meta_rows(store)))
    decoded: list[int] = []
    real = audit_read._decode

    def counted(index: int, raw: Any, where: str) -> Any:
        decoded.append(index)
        return real(index, raw, where)

    for module in (audit, audit_read):  # where records are read, and caught up
        monkeypatch.setattr(module, "_decode", counted)
    assert store.gc(keep_last=3, run_id="a").decided == ()
    assert len(decoded) == 201  # the one-off catch-up
    decoded.clear()
    ids += [rec.checkpoint(i, {"i": i}) for i in range(4, 8)]
    report = store.gc(keep_last=1, run_id="a")
    assert report.decided == (ids[1],)
    assert decoded == [200]


def _decide_as_you_go(path: str, steps: int, done: str) -> tuple[list[str], list[str]]:
    """Record ``steps`` checkpoints; every other one gets a decision or sign-off before its
    child exists (so before a prune can take it). Returns (all ids, named ids)."""
    deadline = time.monotonic() + 60
    while not Path(done + ".sweeping").exists() and time.monotonic() < deadline:
        time.sleep(0.01)  # the sweeper is running before the first decision
    with open_store(path) as st:
        rec = st.recorder("race")
        ids: list[str] = []
        named: list[str] = []
        for i in range(steps):
            cid = rec.checkpoint(i + 1, {"i": i})
            ids.append(cid)
            if i % 4 == 0:
                cpstore.validate(cid, cid, store=st)
                named.append(cid)
            elif i % 4 == 2:
                st.append_audit("signoff", {"checkpoint_id": cid, "operator": "o"})
                named.append(cid)
        rec.close()
    Path(done).touch()
    return ids, named


def _sweep_until(path: str, done: str) -> list[tuple[list[str], list[str]]]:
    """Prune ``race`` to its head until ``done`` exists, then once more; each report's
    (checkpoints, decided)."""
    out: list[tuple[list[str], list[str]]] = []
    with open_store(path) as st:
        finished = False
        while not finished:
            finished = Path(done).exists()
            report = st.gc(keep_last=1, run_id="race", dry_run=False)
            out.append((list(report.checkpoints), list(report.decided)))
            Path(done + ".sweeping").touch()
            time.sleep(0.01)
    return out


def test_a_sweep_racing_decisions_in_another_process_misses_none(url: str, tmp_path: Path) -> None:
    """Decisions appended in one process, prunes in another: every removed checkpoint a
    record named before its child existed is in its sweep's ``decided`` and gc record."""
    path = url
    with open_store(path) as st:
        st.recorder("race").checkpoint(0, b"root")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        done = str(tmp_path / "done")
        writer = pool.apply_async(_decide_as_you_go, (path, 120, done))
        sweeper = pool.apply_async(_sweep_until, (path, done))
        ids, named = writer.get(300)
        reports = sweeper.get(300)
    removed = [c for checkpoints, _ in reports for c in checkpoints]
    assert len(removed) == len(set(removed)) == len(ids)  # every one but the head, and the root
    for checkpoints, decided in reports:
        assert decided == [c for c in checkpoints if c in set(named)]
    assert sorted(c for _, decided in reports for c in decided) == sorted(
        c for c in named if c != ids[-1]
    )
    assert sum(1 for _, d in reports if d) > 1  # the sweeps really interleaved with decisions
    with open_store(path) as st:
        gc_records = [r.body["decided"] for r in st.audit_records(kind="gc")]
        assert gc_records == [d for _, d in reports if d]
        result = st.verify()
        assert result.ok, result.problems
