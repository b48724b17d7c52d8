"""The gate index: "signed off?" and "used?" answered exactly as the full scans did."""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from pg_cluster import (  # noqa: F401 - fixtures
    backend_url,
    pg_cluster,
    pg_url,
)
from test_decision_support import stored_replay

from cpstore.decision import gate_reads
from cpstore.decision.gates import MIN_PREFIX, resume_gate, sign_off
from cpstore.decision.ports import AuditEntry, AuditLog
from cpstore.decision.validate import validate
from cpstore.errors import (
    AuditChainError,
    CpstoreError,
    InvalidInputError,
    NotFoundError,
    SignOffError,
)
from cpstore.native.canonical import decode_value, encode_value
from cpstore.run.model import ReplayMode
from cpstore.store import audit, audit_read
from cpstore.store.audit_gates import (
    DECISION_ID_PREFIX,
    GATE_INDEX_VERSION,
    GATES_INDEXED,
    SIGNED_PREFIX,
    USED_PREFIX,
    gate_count,
)
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with open_store(url) as st:
        yield st


# -- the scans the index replaced, copied literally from gates.py before it ---------------


def old_signed_by(log: AuditLog, rec: AuditEntry) -> AuditEntry | None:
    """``sign_off``'s old check: the first signoff after the decision naming it."""
    for earlier in log.audit_records(kind="signoff", start=rec.index + 1):
        if earlier.body.get("decision_audit") == rec.digest:
            return earlier
    return None


def old_used_sign_offs(store: AuditLog) -> set[object]:
    """``_used_sign_offs`` as it was: every gate record's ``sign_off``."""
    return {
        r.body.get("sign_off")
        for r in store.audit_records(kind="gate")
        if r.body.get("sign_off") is not None
    }


#: What ``_decision_by_name`` says of a name too short or not hex to be a prefix.
BAD_NAME = (
    "a decision is named by its id, its audit digest or a prefix of at least "
    f"{MIN_PREFIX} hex characters of either"
)


def old_decision_by_name(store: AuditLog, ident: str) -> list[AuditEntry]:
    """``_decision_by_name`` as it was: every decision record read."""
    records = list(store.audit_records(kind="decision"))
    found = [r for r in records if r.body.get("decision_id") == ident]
    if found:
        return found
    found = [r for r in records if r.digest == ident]
    if found:
        return found
    if len(ident) < MIN_PREFIX or not all(c in "0123456789abcdefABCDEF" for c in ident):
        # Since small3: a name no id or digest can start with is bad input, not "none".
        raise InvalidInputError(BAD_NAME)
    low = ident.lower()
    matches = {
        r.digest: r
        for r in records
        if str(r.body.get("decision_id", "")).startswith(low) or r.digest.startswith(low)
    }
    if len(matches) > 1:
        raise InvalidInputError("ambiguous decision prefix; give more characters")
    return list(matches.values())


def _outcome(find: Any, log: Any, ident: str) -> object:
    try:
        return [r.digest for r in find(log, ident)]
    except InvalidInputError as exc:
        return exc.what


def _index_agrees_with_the_scans(store: Store) -> int:
    """Every decision's, decision id's and sign-off's answer from the index equals the
    old scan's, as do the gates' decision lookups by id, digest and prefix."""
    checked = 0
    with store.audit_view() as log:
        used = old_used_sign_offs(log)
        decisions = list(log.audit_records(kind="decision"))
        idents = {"absent-id", "0" * 32}
        for rec in decisions:
            did = rec.body.get("decision_id")
            idents.update([rec.digest, rec.digest[:MIN_PREFIX], rec.digest.upper()])
            if isinstance(did, str) and did:
                idents.update([did, did[:MIN_PREFIX]])
        for ident in sorted(idents):
            same = [r.digest for r in decisions if r.body.get("decision_id") == ident]
            assert [r.digest for r in log.decisions_by_id(ident)] == same, ident
            old = _outcome(old_decision_by_name, log, ident)
            assert _outcome(gate_reads._decision_by_name, log, ident) == old, ident
            checked += 1
        for rec in log.audit_records():
            if rec.kind == "decision":
                got, want = log.sign_off_of(rec), old_signed_by(log, rec)
                assert (got and got.digest) == (want and want.digest), rec.index
                checked += 1
            elif rec.kind == "signoff":
                assert (log.sign_off_use(rec) is not None) == (rec.digest in used), rec.index
                checked += 1
    return checked


def _meta_rows(store: Store) -> dict[bytes, bytes]:
    """The index's rows as the store holds them."""
    meta = store.backend.dbs["meta"]
    with store.backend.read_txn() as txn, txn.cursor(db=meta) as cur:
        return {
            bytes(k): bytes(v)
            for k, v in cur
            if bytes(k).startswith((SIGNED_PREFIX, USED_PREFIX)) or bytes(k) == GATES_INDEXED
        }


def _rewrite(store: Store, puts: dict[bytes, bytes], deletes: list[bytes]) -> None:
    """Change meta rows behind the index's back (an older cpstore, or damage)."""
    meta = store.backend.dbs["meta"]

    def run(txn: Any) -> None:
        for key in deletes:
            txn.delete(key, db=meta)
        for key, value in puts.items():
            txn.put(key, value, db=meta)

    store.backend.write_txn(run)


def _as_older_release(patch: pytest.MonkeyPatch) -> None:
    """Appends from here on keep no gate index (what a release before it wrote)."""
    patch.setattr(audit, "put_gate_rows", lambda *a, **k: None)
    patch.setattr(audit, "set_gate_count", lambda *a, **k: None)


def _checkpoint(store: Store, run: str) -> str:
    rec = store.recorder(run)
    rec.observe(1, "clock", b"t", pinned_at=1.0)
    rec.token("rng", 1)
    return str(rec.checkpoint(1, b"state"))


def _released(store: Store, run: str) -> tuple[str, Any]:
    """A checkpoint and its QUARANTINE decision (releasable by a sign-off)."""
    cid = _checkpoint(store, run)
    return cid, validate(cid, stored_replay(store, cid, mode=ReplayMode.BEST_EFFORT), store=store)


def _pick_digest(rng: random.Random, digests: list[str]) -> object:
    """A field naming a record: mostly a real digest, sometimes one that names nothing."""
    pick = rng.random()
    if pick < 0.6 and digests:
        return rng.choice(digests)
    if pick < 0.7 and digests:
        return rng.choice(digests).upper()
    if pick < 0.8:
        return f"{rng.getrandbits(128):032x}"
    return None if pick < 0.9 else 7


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_mixes_answer_as_the_full_scans(store: Store, seed: int) -> None:
    """Real and raw decisions, sign-offs and gates, appends by an older release, rewound
    counts: every answer equals the old scans', every gate outcome what they predict."""
    rng = random.Random(seed)
    decisions: list[tuple[str, Any]] = []
    signoffs: dict[str, list[str]] = {}  # decision id -> its sign-offs' digests
    raw_decisions: list[str] = []
    for step in range(60):
        event = rng.random()
        if event < 0.15:
            decisions.append(_released(store, f"run-{step}"))
        elif event < 0.3 and decisions:
            cid, d = rng.choice(decisions)
            with store.audit_view() as log:
                rec = log.get_audit(d.audit_digest)
                signed = old_signed_by(log, rec)
            try:
                so = sign_off(store, d, operator="op", reason="r")
                signoffs.setdefault(d.id, []).append(so.audit_digest)
                assert signed is None
            except SignOffError as exc:
                assert signed is not None and exc.got == signed.digest
        elif event < 0.45 and signoffs:
            did = rng.choice(sorted(signoffs))
            cid, d = next(x for x in decisions if x[1].id == did)
            so_digest = rng.choice(signoffs[did])
            was_used = so_digest in old_used_sign_offs(store)
            try:
                resume_gate(store, cid, d, sign_off=so_digest)
                assert not was_used
            except SignOffError as exc:
                assert was_used and "already used" in exc.what
        elif event < 0.8:
            kind = rng.choice(["decision", "signoff", "gate", "note"])
            with store.audit_view() as log:
                every = [r for r in log.audit_records() if r.kind in ("decision", "signoff")]
            names = [r.digest for r in every] + raw_decisions
            pool = [f"raw-{step}", "raw-dup", 7, "x" * 500, "é-ü", ""]
            body: dict[str, Any] = {"decision_id": rng.choice(pool), "n": step}
            if kind == "signoff":
                body["decision_audit"] = _pick_digest(rng, names)
            elif kind == "gate":
                body["sign_off"] = _pick_digest(rng, names)
            with pytest.MonkeyPatch.context() as patch:
                if rng.random() < 0.25:
                    _as_older_release(patch)
                rec = store.append_audit(kind, body)
            if kind == "decision":
                raw_decisions.append(rec.digest)
        elif event < 0.9:
            with store.backend.read_txn() as txn:
                covered = gate_count(txn, store.backend.dbs["meta"])
            _rewrite(
                store,
                {GATES_INDEXED: encode_value([GATE_INDEX_VERSION, rng.randint(0, covered)])},
                [],
            )
        assert _index_agrees_with_the_scans(store) >= 0
    assert _index_agrees_with_the_scans(store) > 10
    store.append_audit("note", {})  # catches the index up
    assert decode_value(_meta_rows(store)[GATES_INDEXED]) == [
        GATE_INDEX_VERSION,
        len(list(store.audit_records())),
    ]
    result = store.verify()
    assert result.ok, result.problems


def _history(store: Store) -> dict[str, Any]:
    """Decision d1 signed off by s1 and used by gate g1; d2 signed off by s2, unused; d3
    unsigned; a note."""
    c1, d1 = _released(store, "one")
    c2, d2 = _released(store, "two")
    c3, d3 = _released(store, "three")
    s1 = sign_off(store, d1, operator="op", reason="r")
    s2 = sign_off(store, d2, operator="op", reason="r")
    g1 = resume_gate(store, c1, d1, sign_off=s1)
    note = store.append_audit("note", {})
    return {
        "c1": c1, "d1": d1, "c2": c2, "d2": d2, "c3": c3, "d3": d3,
        "s1": s1, "s2": s2, "g1": g1, "note": note,
    }  # fmt: skip


def _index_of(store: Store, digest_hex: str) -> int:
    return store.get_audit(digest_hex).index


def _count_decodes(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The indexes of the audit records decoded from now on (``_decode`` counted where the
    log is read, audit_read, and where it is caught up, audit)."""
    decoded: list[int] = []
    real = audit_read._decode

    def counted(index: int, raw: Any, where: str) -> Any:
        decoded.append(index)
        return real(index, raw, where)

    for module in (audit, audit_read):  # where records are read, and caught up
        monkeypatch.setattr(module, "_decode", counted)
    return decoded


def test_an_older_store_is_caught_up_by_the_next_append(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No index rows (an older store): answers come from the log; the next append reads
    the log once and writes exactly the rows verify expects; then no more scans."""
    h = _history(store)
    _rewrite(store, {}, list(_meta_rows(store)))
    with pytest.raises(SignOffError, match="already used"):
        resume_gate(store, h["c1"], h["d1"], sign_off=h["s1"])
    assert _index_agrees_with_the_scans(store) > 5
    count = len(list(store.audit_records()))
    decoded = _count_decodes(monkeypatch)
    store.append_audit("note", {"after": True})
    assert sorted(decoded) == list(range(count))  # the one-off catch-up
    rows = _meta_rows(store)
    assert decode_value(rows[GATES_INDEXED]) == [GATE_INDEX_VERSION, count + 1]
    signed = {k[len(SIGNED_PREFIX) :].hex(): decode_value(v) for k, v in rows.items()
              if k.startswith(SIGNED_PREFIX)}  # fmt: skip
    assert signed == {
        h["d1"].audit_digest: _index_of(store, h["s1"].audit_digest),
        h["d2"].audit_digest: _index_of(store, h["s2"].audit_digest),
        h["d3"].audit_digest: None,
    }
    used = {k[len(USED_PREFIX) :].hex(): decode_value(v) for k, v in rows.items()
            if k.startswith(USED_PREFIX)}  # fmt: skip
    assert used == {
        h["s1"].audit_digest: _index_of(store, h["g1"].audit_digest),
        h["s2"].audit_digest: None,
    }
    decoded.clear()
    with store.audit_view() as log:
        assert log.sign_off_use(log.get_audit(h["s2"].audit_digest)) is None
        found = log.sign_off_use(log.get_audit(h["s1"].audit_digest))
        assert found is not None and found.digest == h["g1"].audit_digest
        signed_by = log.sign_off_of(log.get_audit(h["d3"].audit_digest))
        assert signed_by is None
    # get_audit decodes its record (3), the used entry its witness (1): no scan.
    assert len(decoded) == 4
    result = store.verify()
    assert result.ok, result.problems


def test_a_lagging_index_or_one_of_another_version_answers_from_the_log(store: Store) -> None:
    """Records past the covered count (an older release appended a sign-off and its use)
    and a count of another version: the gates still refuse; the next append rebuilds."""
    c1, d1 = _released(store, "one")
    with pytest.MonkeyPatch.context() as patch:
        _as_older_release(patch)
        so = sign_off(store, d1, operator="op", reason="older release")
        resume_gate(store, c1, d1, sign_off=so)
    with store.backend.read_txn() as txn:
        covered = gate_count(txn, store.backend.dbs["meta"])
    assert covered < len(list(store.audit_records()))
    assert store.verify().ok  # a lag is no damage
    with pytest.raises(SignOffError, match="already signed off"):
        sign_off(store, d1, operator="op", reason="again")
    with pytest.raises(SignOffError, match="already used"):
        resume_gate(store, c1, d1, sign_off=so)
    _rewrite(store, {GATES_INDEXED: encode_value([GATE_INDEX_VERSION + 1, 10**6])}, [])
    with store.backend.read_txn() as txn:
        assert gate_count(txn, store.backend.dbs["meta"]) == 0
    with pytest.raises(SignOffError, match="already used"):
        resume_gate(store, c1, d1, sign_off=so)
    store.append_audit("note", {})
    assert decode_value(_meta_rows(store)[GATES_INDEXED]) == [
        GATE_INDEX_VERSION,
        len(list(store.audit_records())),
    ]
    assert _index_agrees_with_the_scans(store) > 2
    result = store.verify()
    assert result.ok, result.problems


def test_a_missing_row_refuses_instead_of_looking_unused(store: Store) -> None:
    """A deleted row of a covered sign-off or decision is an AuditChainError: a used
    sign-off never releases a second resume, a signed decision never takes a second
    sign-off; verify names both rows."""
    h = _history(store)
    s1, d1 = h["s1"].audit_digest, h["d1"].audit_digest
    _rewrite(store, {}, [USED_PREFIX + bytes.fromhex(s1), SIGNED_PREFIX + bytes.fromhex(d1)])
    gates = len(list(store.audit_records(kind="gate")))
    with pytest.raises(AuditChainError) as caught:
        resume_gate(store, h["c1"], h["d1"], sign_off=s1)
    assert caught.value.where == f"meta/signoff_used/{s1}"
    with pytest.raises(AuditChainError) as caught:
        sign_off(store, h["d1"], operator="op", reason="again")
    assert caught.value.where == f"meta/signed/{d1}"
    assert len(list(store.audit_records(kind="gate"))) == gates
    places = {(p.what, p.where) for p in store.verify().problems}
    assert places == {
        ("gate index lacks a sign-off record's row", f"meta/signoff_used/{s1}"),
        ("gate index lacks a decision record's row", f"meta/signed/{d1}"),
    }


def test_a_forged_or_moved_row_is_refused_and_reported(store: Store) -> None:
    """A row naming a record that does not sign or use its key (a note; another sign-off's
    gate) is an AuditChainError naming the row; verify reports each as disagreeing."""
    h = _history(store)
    d3, s2 = h["d3"].audit_digest, h["s2"].audit_digest
    g1 = _index_of(store, h["g1"].audit_digest)
    _rewrite(
        store,
        {
            SIGNED_PREFIX + bytes.fromhex(d3): encode_value(h["note"].index),  # forged
            USED_PREFIX + bytes.fromhex(s2): encode_value(g1),  # moved: g1 used s1
        },
        [],
    )
    with pytest.raises(AuditChainError) as caught:
        sign_off(store, h["d3"], operator="op", reason="r")
    assert caught.value.where == f"meta/signed/{d3}"
    assert caught.value.got == h["note"].index
    with pytest.raises(AuditChainError) as caught:
        resume_gate(store, h["c2"], h["d2"], sign_off=s2)
    assert caught.value.where == f"meta/signoff_used/{s2}"
    problems = store.verify().problems
    assert {(p.where, p.expected, p.got) for p in problems} == {
        (f"meta/signed/{d3}", None, h["note"].index),
        (f"meta/signoff_used/{s2}", None, g1),
    }


def test_a_row_rewritten_to_nil_is_found_by_verify(store: Store) -> None:
    """The one rewrite the gates cannot see (docs/security.md): a used sign-off's row set
    back to nil. verify() reports it with the gate that used it."""
    h = _history(store)
    s1 = h["s1"].audit_digest
    _rewrite(store, {USED_PREFIX + bytes.fromhex(s1): encode_value(None)}, [])
    problems = store.verify().problems
    assert [(p.what, p.where, p.expected, p.got) for p in problems] == [
        (
            "gate index disagrees with the audit log (used sign-offs)",
            f"meta/signoff_used/{s1}",
            _index_of(store, h["g1"].audit_digest),
            None,
        )
    ]


def test_a_stray_row_is_reported(store: Store) -> None:
    """A row for a digest that is no covered decision is reported, nil or not."""
    _history(store)
    stray = "ab" * 16
    _rewrite(store, {SIGNED_PREFIX + bytes.fromhex(stray): encode_value(None)}, [])
    problems = store.verify().problems
    assert [(p.what, p.where) for p in problems] == [
        ("gate index disagrees with the audit log (signed decisions)", f"meta/signed/{stray}")
    ]


def test_the_gates_decode_no_record_they_do_not_need(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Beside 300 other records, "used?" and "signed off?" decode at most their row's
    witness, and a resume gate or sign-off a handful of records, not the log."""
    c1, d1 = _released(store, "one")
    so = sign_off(store, d1, operator="op", reason="r")
    for i in range(300):
        store.append_audit("gate" if i % 2 else "signoff", {"n": i})
    records = len(list(store.audit_records()))
    decoded = _count_decodes(monkeypatch)
    with store.audit_view() as log:
        rec, sign = log.get_audit(d1.audit_digest), log.get_audit(so.audit_digest)
        decoded.clear()
        assert log.sign_off_use(sign) is None
        found = log.sign_off_of(rec)
        assert found is not None and found.digest == so.audit_digest
    assert decoded == [sign.index]  # the signed row's witness; the nil row none
    decoded.clear()
    resume_gate(store, c1, d1, sign_off=so)
    assert len(decoded) < 12 < records  # rows' witnesses, chain links; the scans read all
    decoded.clear()
    with pytest.raises(SignOffError, match="already signed off"):
        sign_off(store, d1, operator="op", reason="again")
    assert sign.index in decoded
    assert len(decoded) < 12
    decoded.clear()
    with pytest.raises(SignOffError, match="already used"):
        resume_gate(store, c1, d1.id, sign_off=so)  # by decision id: a row, not a scan
    assert len(decoded) < 12


def test_a_failed_gate_leaves_no_row_behind(store: Store) -> None:
    """A refused gate appends nothing and changes no row of the index."""
    h = _history(store)
    before = _meta_rows(store)
    with pytest.raises(CpstoreError):
        resume_gate(store, h["c1"], h["d1"], sign_off=h["s1"])
    assert _meta_rows(store) == before


def test_a_deleted_or_forged_decision_id_row_never_finds_a_decision(store: Store) -> None:
    """A deleted ``decision_id`` row makes the decision unknown (the gate refuses, by the
    Decision or by a str: the prefix search asks the same rows); a row
    naming a record that is not that decision is an AuditChainError; a row dropping a
    duplicate hides it from the gates, and verify reports all three."""
    h = _history(store)
    d1, d2, d3 = h["d1"], h["d2"], h["d3"]
    dup = store.append_audit("decision", {"decision_id": d3.id, "verdict": "ACCEPT"})
    with pytest.raises(CpstoreError, match="more than once"):
        resume_gate(store, h["c3"], d3.id)
    key = DECISION_ID_PREFIX + d1.id.encode()
    _rewrite(
        store,
        {
            DECISION_ID_PREFIX + d2.id.encode(): encode_value([h["note"].index]),
            DECISION_ID_PREFIX + d3.id.encode(): encode_value([_index_of(store, d3.audit_digest)]),
        },
        [key],
    )
    with pytest.raises(NotFoundError):
        resume_gate(store, h["c1"], d1, sign_off=h["s1"])
    with pytest.raises(NotFoundError):  # the id as a str: the prefix rows miss it too
        resume_gate(store, h["c1"], d1.id, sign_off=h["s1"])
    with pytest.raises(AuditChainError) as caught:
        sign_off(store, d2, operator="op", reason="r")
    assert caught.value.where == f"meta/decision_id/{d2.id}"
    places = {(p.what, p.where) for p in store.verify().problems}
    assert places == {
        ("gate index lacks a decision id", f"meta/decision_id/{d1.id}"),
        ("gate index disagrees with the audit log (decisions by id)", f"meta/decision_id/{d2.id}"),
        ("gate index disagrees with the audit log (decisions by id)", f"meta/decision_id/{d3.id}"),
    }
    assert dup.index > _index_of(store, d3.audit_digest)
