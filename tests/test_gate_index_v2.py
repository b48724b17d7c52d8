"""Gate index v2: "permit used?", "branch quarantined?" and decisions by prefix answered
exactly as the full scans did, with damage refused and reported."""

from __future__ import annotations

import random
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pg_cluster import (  # noqa: F401 - fixtures
    backend_url,
    pg_cluster,
    pg_url,
)
from test_decision_support import full_replay, stored_replay
from test_gate_index import (
    _as_older_release,
    _checkpoint,
    _count_decodes,
    _outcome,
    _released,
    _rewrite,
    old_decision_by_name,
)

from cpstore.decision import gate_reads
from cpstore.decision.gates import (
    MIN_PREFIX,
    certify_rollback,
    check_resume,
    resume_gate,
    sign_off,
)
from cpstore.decision.ports import AuditEntry, AuditLog
from cpstore.decision.validate import validate
from cpstore.errors import AuditChainError, GateError, NotFoundError
from cpstore.native.canonical import decode_value, encode_value
from cpstore.run.model import ReplayMode
from cpstore.store.audit_gates import GATE_INDEX_VERSION, GATES_INDEXED, gate_count
from cpstore.store.audit_permits import ODD_ID_PREFIX, PERMIT_PREFIX, QUARANTINE_PREFIX
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.maintenance import compact_store
from cpstore.store.model import AuditRecord

V2_FAMILIES = (PERMIT_PREFIX, QUARANTINE_PREFIX, ODD_ID_PREFIX)


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with open_store(url) as st:
        yield st


# -- the scans the index replaced, copied literally from gates.py before it ---------------


def old_quarantine(log: AuditLog, rec: AuditEntry) -> AuditEntry | None:
    """``certify_rollback``'s old search: the first QUARANTINE decision of the branch."""
    recorded = rec.body.get("recorded") or {}
    run_id, branch = recorded.get("run_id"), recorded.get("branch")
    for r in log.audit_records(kind="decision"):
        other = r.body.get("recorded") or {}
        if (
            other.get("run_id") == run_id
            and other.get("branch") == branch
            and r.body.get("verdict") == "QUARANTINE"
        ):
            return r
    return None


def old_permit_use(log: AuditLog, gate: AuditEntry) -> AuditEntry | None:
    """``_use_permit``'s old scan: the first resume record after the gate naming it."""
    for used in log.audit_records(kind="resume", start=gate.index + 1):
        if used.body.get("permit") == gate.digest:
            return used
    return None


def _digest(rec: AuditEntry | None) -> str | None:
    return None if rec is None else rec.digest


def _agrees_with_the_scans(store: Store) -> int:
    """Every permit's use, every decision's branch quarantine and every prefix's decisions
    from the index equal the old scans'; how many answers were compared."""
    checked = 0
    with store.audit_view() as log:
        records = list(log.audit_records())
        idents = {"deadbeef", "deadbeef0", "0123456789abcdef" * 5}
        for rec in records:
            if rec.kind == "decision":
                want = old_quarantine(log, rec)
                assert _digest(log.branch_quarantine(rec)) == _digest(want), rec.index
                text = str(rec.body.get("decision_id", ""))
                for ident in (text[:8], text[:13], text[:70], rec.digest[:8], rec.digest[:9]):
                    idents.update([ident, ident.upper()])
            elif rec.kind == "gate" and rec.body.get("gate") == "resume":
                got, used = log.permit_use(rec), old_permit_use(log, rec)
                assert _digest(got) == _digest(used), rec.index
            checked += 1
        decisions = [r for r in records if r.kind == "decision"]
        for ident in sorted(idents):
            old = _outcome(old_decision_by_name, log, ident)
            assert _outcome(gate_reads._decision_by_name, log, ident) == old, ident
            if len(ident) >= MIN_PREFIX and all(c in "0123456789abcdef" for c in ident):
                want_all = [
                    r.digest
                    for r in decisions
                    if str(r.body.get("decision_id", "")).startswith(ident)
                    or r.digest.startswith(ident)
                ]
                assert [r.digest for r in log.decisions_by_prefix(ident)] == want_all, ident
            checked += 1
    return checked


# -- random logs -------------------------------------------------------------------------

_IDS: list[object] = [
    "deadbeef",
    "deadbeef01",
    "DEADBEEF02",
    1234567890,
    12345678.5,
    "deadbeef" + "a" * 400,
    "deadbeef" + "a" * 60 + "b" * 400,  # odd_id keys hold 64: the same key as the one above
    "é-x",
    "",
    None,
    7,
]
_RUNS: list[object] = ["r1", "r2", None, 1, True, 1.0]
_BRANCHES: list[object] = ["main", "b", None, "x" * 500]


def _event(store: Store, rng: random.Random, step: int) -> None:
    """Append one raw record (a decision, gate, resume or note) or rewind the count."""
    with store.audit_view() as log:
        gate_digests = [r.digest for r in log.audit_records(kind="gate")]
    pick = rng.random()
    if pick < 0.1:
        with store.backend.read_txn() as txn:
            covered = gate_count(txn, store.backend.dbs["meta"])
        version = GATE_INDEX_VERSION if rng.random() < 0.7 else 1  # 1: as a v1 store left it
        _rewrite(store, {GATES_INDEXED: encode_value([version, rng.randint(0, covered)])}, [])
        return
    body: dict[str, Any] = {"n": step}
    if pick < 0.5:
        kind = "decision"
        if rng.random() < 0.9:
            body["decision_id"] = rng.choice(_IDS)
        if rng.random() < 0.4:  # one branch often: its first quarantine moves
            body["recorded"] = {"run_id": "r1", "branch": "main"}
        elif rng.random() < 0.7:
            body["recorded"] = {"run_id": rng.choice(_RUNS), "branch": rng.choice(_BRANCHES)}
        body["verdict"] = rng.choice(["QUARANTINE", "ACCEPT", "REJECT", None])
    elif pick < 0.7:
        kind = "gate"
        body["gate"] = rng.choice(["resume", "resume", "rollback"])
    elif pick < 0.9:
        kind = "resume"
        if gate_digests and rng.random() < 0.8:
            body["permit"] = rng.choice(gate_digests)
            if rng.random() < 0.1:
                body["permit"] = body["permit"].upper()  # names nothing
    else:
        kind = "note"
    with pytest.MonkeyPatch.context() as patch:
        if rng.random() < 0.2:
            _as_older_release(patch)
        store.append_audit(kind, body)


def _play(store: Store, seeds: list[int]) -> None:
    for step, seed in enumerate(seeds):
        _event(store, random.Random(seed), step)
        if step % 7 == 6:
            _agrees_with_the_scans(store)
    assert _agrees_with_the_scans(store) >= len(seeds) // 2
    store.append_audit("note", {})  # catches the index up
    assert decode_value(_v2_rows(store)[GATES_INDEXED])[0] == GATE_INDEX_VERSION
    assert _agrees_with_the_scans(store) > 0
    result = store.verify()
    assert result.ok, result.problems


@pytest.mark.parametrize("seed", [1, 2])
def test_random_logs_answer_as_the_full_scans(store: Store, seed: int) -> None:
    """Raw decisions of odd ids and branches, permits and their uses, appends by an older
    release, rewound and v1 counts: every answer equals the old scans', on both backends."""
    rng = random.Random(seed)
    _play(store, [rng.getrandbits(32) for _ in range(50)])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 2**32), min_size=1, max_size=40))
def test_any_log_answers_as_the_full_scans(seeds: list[int]) -> None:
    """Hypothesis over event sequences (LMDB): the index's answers equal the scans'."""
    with tempfile.TemporaryDirectory() as tmp, open_store(str(Path(tmp) / "s")) as store:
        _play(store, seeds)


# -- the gates over the index -------------------------------------------------------------


def _v2_rows(store: Store) -> dict[bytes, bytes]:
    meta = store.backend.dbs["meta"]
    with store.backend.read_txn() as txn, txn.cursor(db=meta) as cur:
        return {
            bytes(k): bytes(v)
            for k, v in cur
            if bytes(k).startswith(V2_FAMILIES) or bytes(k) == GATES_INDEXED
        }


def _branch_with_quarantine(store: Store, run: str) -> dict[str, Any]:
    """A strict ACCEPT of one checkpoint, then a QUARANTINE of the next on the same branch."""
    c1 = _checkpoint(store, run)
    accept = validate(c1, full_replay(store, c1, ReplayMode.STRICT), store=store)
    c2 = _checkpoint(store, run)
    quarantine = validate(c2, full_replay(store, c2, ReplayMode.BEST_EFFORT), store=store)
    assert quarantine.verdict.name == "QUARANTINE"
    return {"c1": c1, "accept": accept, "c2": c2, "q": quarantine}


def _used_permit(store: Store, run: str) -> dict[str, Any]:
    """A released checkpoint, its permit, and the permit used once by a recorder."""
    cid, d = _released(store, run)
    so = sign_off(store, d, operator="op", reason="r")
    permit = resume_gate(store, cid, d, sign_off=so)
    store.recorder(run, permit=permit).close()
    return {"cid": cid, "d": d, "permit": permit}


def test_the_gates_read_no_record_they_do_not_need(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside 300 other records, certify_rollback, a permit's use and a prefix lookup
    decode a handful of records; their answers are the scans' (refusals included)."""
    b = _branch_with_quarantine(store, "q")
    fresh = _branch_with_quarantine(store, "fresh")
    p = _used_permit(store, "p")
    cid, d = _released(store, "unused")
    permit = resume_gate(store, cid, d, sign_off=sign_off(store, d, operator="o", reason="r"))
    for i in range(300):
        store.append_audit(("decision", "gate", "resume")[i % 3], {"n": i, "gate": "resume"})
    records = len(list(store.audit_records()))
    decoded = _count_decodes(monkeypatch)
    with pytest.raises(GateError, match="quarantined") as caught:
        certify_rollback(store, b["c1"], b["accept"])
    assert caught.value.got == b["q"].id
    assert len(decoded) < 12 < records
    decoded.clear()
    with pytest.raises(GateError, match="already used"):
        check_resume(store, p["cid"], run_id="p", branch="main", permit=p["permit"])
    assert len(decoded) < 12
    decoded.clear()
    check_resume(store, cid, run_id="unused", branch="main", permit=permit)
    assert len(decoded) < 12
    decoded.clear()
    with pytest.raises(GateError, match="quarantined"):  # by an operator's 8-char prefix
        certify_rollback(store, fresh["c1"], fresh["accept"].audit_digest[:MIN_PREFIX])
    assert len(decoded) < 12


def test_a_deleted_or_forged_v2_row_refuses(store: Store) -> None:
    """A deleted permit or branch row of a covered record, or one naming a record that is
    not what it claims, is an AuditChainError naming the row, never "unused" or "never
    quarantined"; verify reports each."""
    b = _branch_with_quarantine(store, "q")
    p = _used_permit(store, "p")
    note = store.append_audit("note", {})
    branch_key = QUARANTINE_PREFIX + encode_value(["q", "main"])
    permit_key = PERMIT_PREFIX + bytes.fromhex(p["permit"].audit_digest)
    _rewrite(store, {}, [branch_key, permit_key])
    with pytest.raises(AuditChainError) as caught:
        certify_rollback(store, b["c1"], b["accept"])
    assert caught.value.where == "meta/quarantined/" + branch_key[len(QUARANTINE_PREFIX) :].hex()
    with pytest.raises(AuditChainError) as caught:
        check_resume(store, p["cid"], run_id="p", branch="main", permit=p["permit"])
    assert caught.value.where == f"meta/permit_used/{p['permit'].audit_digest}"
    assert {p.what for p in store.verify().problems} == {
        "gate index lacks a branch's row",
        "gate index lacks a permit's row",
    }
    _rewrite(store, {branch_key: encode_value(note.index), permit_key: encode_value(0)}, [])
    with pytest.raises(AuditChainError, match="not a QUARANTINE"):
        certify_rollback(store, b["c1"], b["accept"])
    with pytest.raises(AuditChainError, match="not a resume"):
        check_resume(store, p["cid"], run_id="p", branch="main", permit=p["permit"])
    assert {p.what for p in store.verify().problems} == {
        "gate index disagrees with the audit log (quarantined branches)",
        "gate index disagrees with the audit log (used permits)",
    }


def test_a_row_rewritten_to_nil_is_found_by_verify(store: Store) -> None:
    """The rewrite the gates cannot see (docs/security.md): a quarantined branch's or a used
    permit's row set back to nil. verify() names both rows with the records they miss."""
    b = _branch_with_quarantine(store, "q")
    p = _used_permit(store, "p")
    branch_key = QUARANTINE_PREFIX + encode_value(["q", "main"])
    permit_key = PERMIT_PREFIX + bytes.fromhex(p["permit"].audit_digest)
    _rewrite(store, {branch_key: encode_value(None), permit_key: encode_value(None)}, [])
    use = next(iter(store.audit_records(kind="resume")))
    found = {(p.where, p.expected, p.got) for p in store.verify().problems}
    assert found == {
        (
            "meta/quarantined/" + branch_key[len(QUARANTINE_PREFIX) :].hex(),
            store.get_audit(b["q"].audit_digest).index,
            None,
        ),
        (f"meta/permit_used/{p['permit'].audit_digest}", use.index, None),
    }


def test_a_forged_odd_id_row_refuses_and_a_deleted_one_hides_only(store: Store) -> None:
    """An ``odd_id/`` row naming another decision is an AuditChainError; verify reports a
    deleted one (the prefix then misses that decision, as a deleted decision_id row)."""
    odd = store.append_audit("decision", {"decision_id": 1234567890})
    other = store.append_audit("decision", {"decision_id": "x"})
    key = ODD_ID_PREFIX + b"1234567890/" + bytes.fromhex(odd.digest)
    with store.audit_view() as log:
        assert [r.digest for r in log.decisions_by_prefix("12345678")] == [odd.digest]
    _rewrite(store, {key: encode_value(other.index)}, [])
    with store.audit_view() as log, pytest.raises(AuditChainError) as caught:
        log.decisions_by_prefix("12345678")
    assert caught.value.where == "meta/" + key.decode("ascii", "backslashreplace")
    _rewrite(store, {}, [key])
    with pytest.raises(NotFoundError):
        certify_rollback(store, "00" * 16, "12345678")
    assert [p.what for p in store.verify().problems] == [
        "gate index lacks an odd decision id's row"
    ]


def _as_v1_store(store: Store) -> None:
    """What the gate index v1 release left: no v2 rows, ``gates_indexed`` = [1, count]."""
    count = len(list(store.audit_records()))
    deletes = [k for k in _v2_rows(store) if k != GATES_INDEXED]
    _rewrite(store, {GATES_INDEXED: encode_value([1, count])}, deletes)


def test_a_v1_store_answers_from_the_log_and_is_caught_up_by_the_next_append(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A store the v1 index release wrote: the gates answer from the log (refusing as
    before), the next append reads the log once and writes exactly the rows verify
    expects (version 2); then no more scans."""
    b = _branch_with_quarantine(store, "q")
    p = _used_permit(store, "p")
    odd = store.append_audit("decision", {"decision_id": 1234567890})
    stale = QUARANTINE_PREFIX + encode_value(["nobody", None])
    before = _v2_rows(store)
    _as_v1_store(store)
    _rewrite(store, {stale: encode_value(None)}, [])  # a stray row a rebuild must drop
    with pytest.raises(GateError, match="quarantined"):
        certify_rollback(store, b["c1"], b["accept"])
    with pytest.raises(GateError, match="already used"):
        check_resume(store, p["cid"], run_id="p", branch="main", permit=p["permit"])
    assert _agrees_with_the_scans(store) > 5
    count = len(list(store.audit_records()))
    decoded = _count_decodes(monkeypatch)
    note = store.append_audit("note", {"after": True})
    assert sorted(decoded) == list(range(count))  # the one-off catch-up
    rows = _v2_rows(store)
    assert decode_value(rows.pop(GATES_INDEXED)) == [GATE_INDEX_VERSION, note.index + 1]
    assert rows == {k: v for k, v in before.items() if k != GATES_INDEXED}
    assert stale not in rows
    decoded.clear()
    with store.audit_view() as log:
        assert [r.digest for r in log.decisions_by_prefix("12345678")] == [odd.digest]
    assert decoded == [odd.index]
    result = store.verify()
    assert result.ok, result.problems


def test_a_decision_of_another_shape_neither_quarantines_nor_breaks_a_branch(
    store: Store,
) -> None:
    """A raw decision whose ``recorded`` is no map names no branch: certify_rollback passes
    beside it (the old scan raised AttributeError on it); a pair of other types than str
    (run id 1, and a quarantine of run id True: equal in Python) is searched in the log."""
    store.append_audit("decision", {"recorded": "garbage", "verdict": "QUARANTINE"})
    clean = _checkpoint(store, "clean")
    accept = validate(clean, stored_replay(store, clean), store=store)
    assert certify_rollback(store, clean, accept).run_id == "clean"
    store.append_audit("decision", {"recorded": {"run_id": True}, "verdict": "QUARANTINE"})
    c3 = _checkpoint(store, "odd")
    body = {
        "decision_id": "odd-accept",
        "recorded": {"checkpoint_id": c3, "run_id": 1, "branch": None},
        "findings": [],
        "verdict": "ACCEPT",
        "mode": "strict",
    }
    store.append_audit("decision", body)
    with pytest.raises(GateError, match="quarantined"):
        certify_rollback(store, c3, "odd-accept")
    result = store.verify()
    assert result.ok, result.problems


def test_a_store_a_v1_release_last_appended_to_verifies_clean_until_rebuilt(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A v1 release's append (count [1, n], the v2 rows it does not know left behind) is no
    damage: verify reports nothing, the gates read the log; a row forged meanwhile is
    reported once the next append has rebuilt the index."""
    gate = store.append_audit("gate", {"gate": "resume"})
    branch = {"run_id": "r", "branch": "b"}
    store.append_audit("decision", {"decision_id": "d1", "recorded": branch, "verdict": "ACCEPT"})
    with pytest.MonkeyPatch.context() as patch:  # what the v1 release appends and sets
        _as_older_release(patch)
        used = store.append_audit("resume", {"permit": gate.digest})
        quarantine = {"decision_id": "d2", "recorded": branch, "verdict": "QUARANTINE"}
        store.append_audit("decision", quarantine)
    _rewrite(store, {GATES_INDEXED: encode_value([1, used.index + 2])}, [])
    result = store.verify()
    assert result.ok, result.problems
    with store.audit_view() as log:
        assert _digest(log.permit_use(gate)) == used.digest
    forged = PERMIT_PREFIX + bytes(16)
    _rewrite(store, {forged: encode_value(None)}, [])
    store.append_audit("note", {})
    problems = store.verify().problems
    assert [p.where for p in problems] == ["meta/permit_used/" + "00" * 16], problems


def test_a_row_holding_an_equal_value_of_another_type_is_found_by_verify(store: Store) -> None:
    """A permit row rewritten from its index to that index as a float, and a branch row to
    True (Python: 1 == 1.0 == True), make the gates refuse with AuditChainError; verify
    reports both rows too, comparing canonical bytes."""
    gate = store.append_audit("gate", {"gate": "resume"})
    quarantine = {"recorded": {"run_id": "r", "branch": "b"}, "verdict": "QUARANTINE"}
    assert store.append_audit("decision", quarantine).index == 1
    use = store.append_audit("resume", {"permit": gate.digest})
    permit_key = PERMIT_PREFIX + bytes.fromhex(gate.digest)
    branch_key = QUARANTINE_PREFIX + encode_value(["r", "b"])
    _rewrite(
        store, {permit_key: encode_value(float(use.index)), branch_key: encode_value(True)}, []
    )
    with store.audit_view() as log:
        with pytest.raises(AuditChainError):
            log.permit_use(gate)
        decision = next(iter(log.audit_records(kind="decision")))
        with pytest.raises(AuditChainError):
            log.branch_quarantine(decision)
    wheres = {p.where for p in store.verify().problems}
    assert wheres == {
        f"meta/permit_used/{gate.digest}",
        "meta/quarantined/" + branch_key[len(QUARANTINE_PREFIX) :].hex(),
    }


@pytest.mark.parametrize("limit", [640, 0])
def test_a_huge_int_id_is_indexed_alike_under_any_int_digit_limit(store: Store, limit: int) -> None:
    """An int decision id of 700 or 5000 digits, indexed by a process with Python's default
    int-to-str limit, is found (700) or not (5000) by a prefix alike in a process with
    another limit (sys.set_int_max_str_digits): a shared prefix stays ambiguous, never
    resolved to the other decision; verify agrees there."""
    long_id = 12345678 * 10**692
    huge_id = 87654321 * 10**4992
    long_rec = store.append_audit("decision", {"decision_id": long_id})
    other = store.append_audit("decision", {"decision_id": "12345678b"})
    store.append_audit("decision", {"decision_id": huge_id})
    store.append_audit("note", {})
    before = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(limit)
    try:
        with store.audit_view() as log:
            found = [r.digest for r in log.decisions_by_prefix("12345678")]
            assert found == [long_rec.digest, other.digest]
            assert log.decisions_by_prefix("87654321") == []
        result = store.verify()
    finally:
        sys.set_int_max_str_digits(before)
    assert result.ok, result.problems


def test_compaction_keeps_the_v2_rows_and_accepts_a_store_a_v1_release_appended_to(
    tmp_path: Path,
) -> None:
    """compact_store (a full verify of the rewritten file) passes on a store a v1 release
    appended to last, and the v2 rows travel unchanged: the gates answer alike after."""
    path = str(tmp_path / "s")
    with open_store(path) as store:
        gate = store.append_audit("gate", {"gate": "resume"})
        quarantine = {"recorded": {"run_id": "r", "branch": "b"}, "verdict": "QUARANTINE"}
        store.append_audit("decision", quarantine)
        use = store.append_audit("resume", {"permit": gate.digest})
        _rewrite(store, {GATES_INDEXED: encode_value([1, use.index + 1])}, [])
        rows = _v2_rows(store)
    compact_store(path)
    with open_store(path) as store:
        assert _v2_rows(store) == rows
        with store.audit_view() as log:
            assert _digest(log.permit_use(gate)) == use.digest
        store.append_audit("note", {})  # rebuilt from record 0
        assert _agrees_with_the_scans(store) > 0
        result = store.verify()
        assert result.ok, result.problems


def _quarantined_branch(store: Store) -> tuple[AuditRecord, bytes]:
    """An ACCEPT and then a QUARANTINE about run r, branch b (raw); the pair's row key."""
    accept = store.append_audit(
        "decision", {"recorded": {"run_id": "r", "branch": "b"}, "verdict": "ACCEPT"}
    )
    store.append_audit(
        "decision", {"recorded": {"run_id": "r", "branch": "b"}, "verdict": "QUARANTINE"}
    )
    return accept, QUARANTINE_PREFIX + encode_value(["r", "b"])


def test_a_damaged_branch_row_stays_refused_after_more_decisions_of_the_branch(
    store: Store,
) -> None:
    """A quarantined row damaged in place is an AuditChainError, and stays one after the
    next decision about the branch is appended (it is not rewritten to "never
    quarantined", which would let a rollback be certified over the quarantine)."""
    accept, key = _quarantined_branch(store)
    _rewrite(store, {key: b"\xff"}, [])
    store.append_audit(
        "decision", {"recorded": {"run_id": "r", "branch": "b"}, "verdict": "ACCEPT"}
    )
    with store.audit_view() as log, pytest.raises(AuditChainError):
        log.branch_quarantine(accept)
    assert not store.verify().ok


@pytest.mark.xfail(
    strict=True,
    reason="audit21: a deleted quarantined/ row is re-created as nil by the next decision "
    "about the pair (indistinguishable from the pair's first decision without a format "
    "change); only verify() finds it then (docs/security.md)",
)
def test_a_deleted_branch_row_stays_refused_after_more_decisions_of_the_branch(
    store: Store,
) -> None:
    """A deleted quarantined row should stay an AuditChainError (or find the quarantine)
    after the next decision about the branch is appended."""
    accept, key = _quarantined_branch(store)
    _rewrite(store, {}, [key])
    store.append_audit(
        "decision", {"recorded": {"run_id": "r", "branch": "b"}, "verdict": "ACCEPT"}
    )
    assert not store.verify().ok
    with store.audit_view() as log:
        try:
            found = log.branch_quarantine(accept)
        except AuditChainError:
            return
    assert found is not None


def test_a_branch_row_naming_a_record_past_the_log_is_refused(store: Store) -> None:
    """A quarantined row forged to name an index past the covered count (past the log) is
    an AuditChainError, never "never quarantined" (it once fell through to the log tail)."""
    accept, key = _quarantined_branch(store)
    _rewrite(store, {key: encode_value(10**6)}, [])
    with store.audit_view() as log, pytest.raises(AuditChainError, match="not a QUARANTINE"):
        log.branch_quarantine(accept)
    assert not store.verify().ok


def test_a_damaged_decision_id_row_stays_refused_after_a_second_decision_with_the_id(
    store: Store,
) -> None:
    """A ``decision_id/`` row damaged in place stays an AuditChainError after another
    decision with that id is appended; it is not rewritten to name only the new one
    (which would let a gate trust an id the log holds twice). A rebuild repairs it."""
    store.append_audit("decision", {"decision_id": "dup"})
    _rewrite(store, {b"decision_id/dup": b"\xff"}, [])
    store.append_audit("decision", {"decision_id": "dup"})
    with store.audit_view() as log, pytest.raises(AuditChainError):
        log.decisions_by_id("dup")
    with pytest.raises(AuditChainError):
        certify_rollback(store, "00" * 16, "dup")
    assert not store.verify().ok
    count = len(list(store.audit_records()))
    _rewrite(store, {GATES_INDEXED: encode_value([1, count])}, [])
    store.append_audit("note", {})  # a rebuild from record 0 removes the damaged row
    with store.audit_view() as log:
        assert [r.index for r in log.decisions_by_id("dup")] == [0, 1]
    result = store.verify()
    assert result.ok, result.problems
