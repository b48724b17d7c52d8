"""Gates under races between processes: a sign-off releases one resume, a newer decision wins."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from pg_cluster import (  # noqa: F401 - fixtures
    backend_url,
    pg_cluster,
    pg_url,
)
from test_decision_support import full_replay, stored_replay

from cpstore.decision.gates import (
    AUDIT_GATE,
    AUDIT_RESUME,
    AUDIT_SIGNOFF,
    certify_rollback,
    resume_gate,
    sign_off,
)
from cpstore.decision.table import AUDIT_DECISION, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import CpstoreError
from cpstore.run.model import ReplayMode
from cpstore.store.facade import open as open_store

if TYPE_CHECKING:
    from cpstore import Store

ROUNDS = 24
WORKERS = 4


def _checkpoint(store: Store, run: str) -> str:
    rec = store.recorder(run)
    rec.observe(1, "clock", b"t", pinned_at=1.0)
    rec.token("rng", 1)
    return str(rec.checkpoint(1, b"state"))


def _report(queue: Any, slot: int, target: Any, args: tuple[Any, ...]) -> None:
    try:
        queue.put((slot, target(*args)))
    except BaseException as exc:  # the parent fails the test with it instead of waiting
        args[1].abort()
        queue.put((slot, f"worker raised {exc!r}"))


def _race(target: Any, args: list[tuple[Any, ...]]) -> list[Any]:
    """Run ``target(barrier, *a)`` in one spawned process per ``a``; their results in order."""
    ctx = multiprocessing.get_context("spawn")
    barrier = ctx.Barrier(len(args))
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_report, args=(queue, i, target, (a[0], barrier, *a[1:])))
        for i, a in enumerate(args)
    ]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=120) for _ in procs)
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0
    return [results[i] for i in range(len(args))]


def _resumer(
    path: str, barrier: Any, rounds: list[tuple[str, str, str]], key: bytes | None
) -> list[str | None]:
    """Each round: wait for all, then try the round's sign-off; the permit digest or None."""
    out: list[str | None] = []
    with open_store(path, audit_key=key) as st:
        for cid, decision_id, so in rounds:
            barrier.wait()
            try:
                out.append(resume_gate(st, cid, decision_id, sign_off=so).audit_digest)
            except CpstoreError:
                out.append(None)
    return out


@pytest.mark.parametrize("key", [None, b"k" * 32], ids=["plain", "keyed"])
def test_one_sign_off_releases_one_resume_among_racing_processes(
    url: str, key: bytes | None
) -> None:
    """24 rounds of 4 processes racing one sign-off: exactly one permit per round (keyed
    too), on LMDB and PostgreSQL; the gate index agrees (verify)."""
    path = url
    rounds = []
    with open_store(path, audit_key=key) as st:
        for i in range(ROUNDS):
            cid = _checkpoint(st, f"run-{i}")
            d = validate(cid, stored_replay(st, cid, mode=ReplayMode.BEST_EFFORT), store=st)
            assert d.verdict is Verdict.QUARANTINE
            so = sign_off(st, d, operator="op", reason="drill")
            rounds.append((cid, d.id, so.audit_digest))
    results = _race(_resumer, [(path, rounds, key)] * WORKERS)
    permits = [sum(r[i] is not None for r in results) for i in range(ROUNDS)]
    assert permits == [1] * ROUNDS
    with open_store(path, audit_key=key) as st:
        gates = [g.body["sign_off"] for g in st.audit_records(kind=AUDIT_GATE)]
        assert sorted(gates) == sorted(so for _, _, so in rounds)
        result = st.verify()
        assert result.ok, result.problems


def _signer(
    path: str, barrier: Any, rounds: list[str], key: bytes | None, who: str
) -> list[str | None]:
    """Each round: wait for all, then sign the round's decision off; the digest or None."""
    out: list[str | None] = []
    with open_store(path, audit_key=key) as st:
        for decision_id in rounds:
            barrier.wait()
            try:
                out.append(sign_off(st, decision_id, operator=who, reason="race").audit_digest)
            except CpstoreError:
                out.append(None)
    return out


@pytest.mark.parametrize("key", [None, b"k" * 32], ids=["plain", "keyed"])
def test_one_decision_takes_one_sign_off_among_racing_processes(
    url: str, key: bytes | None
) -> None:
    """24 rounds of 4 processes signing one decision off: exactly one sign-off per round
    and per decision in the log, on LMDB and PostgreSQL; the gate index agrees."""
    rounds = []
    with open_store(url, audit_key=key) as st:
        for i in range(ROUNDS):
            cid = _checkpoint(st, f"run-{i}")
            d = validate(cid, stored_replay(st, cid, mode=ReplayMode.BEST_EFFORT), store=st)
            assert d.verdict is Verdict.QUARANTINE
            rounds.append(d.id)
    results = _race(_signer, [(url, rounds, key, f"op-{w}") for w in range(WORKERS)])
    assert [sum(r[i] is not None for r in results) for i in range(ROUNDS)] == [1] * ROUNDS
    with open_store(url, audit_key=key) as st:
        signed = [r.body["decision_id"] for r in st.audit_records(kind=AUDIT_SIGNOFF)]
        assert sorted(signed) == sorted(rounds)
        result = st.verify()
        assert result.ok, result.problems


def _gate_or_supersede(
    path: str, barrier: Any, role: int, rounds: list[tuple[str, str]]
) -> list[str | None]:
    """Roles 0-1 pass the ACCEPT's resume gate; roles 2-3 record a newer REJECT."""
    out: list[str | None] = []
    with open_store(path) as st:
        for cid, accept_id in rounds:
            barrier.wait()
            try:
                if role < 2:
                    out.append(resume_gate(st, cid, accept_id).audit_digest)
                else:
                    diverged = stored_replay(st, cid, state_digest=f"other-{role}")
                    d = validate(cid, diverged, store=st)
                    out.append(d.audit_digest)
            except CpstoreError:
                out.append(None)
    return out


def test_a_gate_never_passes_on_a_decision_superseded_before_its_record(tmp_path: Path) -> None:
    """Gates racing newer decisions: every gate record precedes any newer decision about it."""
    path = str(tmp_path / "s")
    rounds = []
    with open_store(path) as st:
        for i in range(ROUNDS):
            cid = _checkpoint(st, f"run-{i}")
            d = validate(cid, stored_replay(st, cid), store=st)
            assert d.verdict is Verdict.ACCEPT
            rounds.append((cid, d.id))
    _race(_gate_or_supersede, [(path, role, rounds) for role in range(WORKERS)])
    with open_store(path) as st:
        records = list(st.audit_records())
        for cid, accept_id in rounds:
            newer = [
                r.index
                for r in records
                if r.kind == AUDIT_DECISION
                and r.body["recorded"]["checkpoint_id"] == cid
                and r.body["decision_id"] != accept_id
            ]
            assert len(newer) == 2
            gates = [
                r.index for r in records if r.kind == AUDIT_GATE and r.body["checkpoint_id"] == cid
            ]
            assert all(g < min(newer) for g in gates), (cid, gates, newer)
        assert st.verify().ok


def _recorder_with_permit(path: str, barrier: Any, rounds: list[tuple[str, str]]) -> list[bool]:
    """Each round: wait for all, then open a recorder on the run with the round's permit."""
    out: list[bool] = []
    with open_store(path) as st:
        for run, permit in rounds:
            barrier.wait()
            try:
                st.recorder(run, permit=permit)
                out.append(True)
            except CpstoreError:
                out.append(False)
    return out


def test_one_permit_opens_one_recorder_among_racing_processes(url: str) -> None:
    """24 rounds of 4 processes racing one permit on a rejected-then-released head: one each,
    on LMDB and PostgreSQL; the permit rows of the gate index agree (verify)."""
    path = url
    rounds = []
    with open_store(path) as st:
        for i in range(ROUNDS):
            cid = _checkpoint(st, f"run-{i}")
            d = validate(cid, stored_replay(st, cid, mode=ReplayMode.BEST_EFFORT), store=st)
            so = sign_off(st, d, operator="op", reason="drill")
            rounds.append((f"run-{i}", resume_gate(st, cid, d, sign_off=so).audit_digest))
    results = _race(_recorder_with_permit, [(path, rounds)] * WORKERS)
    assert [sum(r[i] for r in results) for i in range(ROUNDS)] == [1] * ROUNDS
    with open_store(path) as st:
        used = [r.body["permit"] for r in st.audit_records(kind=AUDIT_RESUME)]
        assert sorted(used) == sorted(p for _, p in rounds)
        result = st.verify()
        assert result.ok, result.problems


def _certify_or_quarantine(
    path: str, barrier: Any, role: int, rounds: list[tuple[str, str, str]]
) -> list[str | None]:
    """Roles 0-1 certify a rollback on the round's ACCEPT; roles 2-3 quarantine the next
    checkpoint of its branch. The certificate's digest, or the refusal's message."""
    out: list[str | None] = []
    with open_store(path) as st:
        for accepted, accept_id, later in rounds:
            barrier.wait()
            try:
                if role < 2:
                    out.append(certify_rollback(st, accepted, accept_id).audit_digest)
                else:
                    replay = full_replay(st, later, ReplayMode.BEST_EFFORT)
                    out.append(validate(later, replay, store=st).verdict.name)
            except CpstoreError as exc:
                out.append(exc.what)
    return out


def test_a_rollback_is_never_certified_over_a_quarantine_appended_concurrently(
    url: str,
) -> None:
    """Certifications racing quarantines of the same branch: every rollback certificate
    precedes the branch's first quarantine in the log, every refusal names the quarantine,
    on LMDB and PostgreSQL; the branch rows of the gate index agree (verify)."""
    rounds = []
    with open_store(url) as st:
        for i in range(ROUNDS):
            accepted = _checkpoint(st, f"run-{i}")
            d = validate(accepted, stored_replay(st, accepted), store=st)
            assert d.verdict is Verdict.ACCEPT
            rounds.append((accepted, d.id, _checkpoint(st, f"run-{i}")))
    results = _race(_certify_or_quarantine, [(url, role, rounds) for role in range(WORKERS)])
    for certifier in results[:2]:
        for got in certifier:
            assert got is None or len(got) == 32 or "quarantined" in got, got
    assert all(got == "QUARANTINE" for quarantiner in results[2:] for got in quarantiner)
    with open_store(url) as st:
        records = list(st.audit_records())
        for i in range(ROUNDS):
            run = f"run-{i}"
            quarantines = [
                r.index
                for r in records
                if r.kind == AUDIT_DECISION
                and r.body["recorded"]["run_id"] == run
                and r.body["verdict"] == "QUARANTINE"
            ]
            certified = [
                r.index
                for r in records
                if r.kind == AUDIT_GATE
                and r.body["gate"] == "rollback"
                and r.body["checkpoint_id"] == rounds[i][0]
            ]
            assert len(quarantines) == 2
            assert all(c < min(quarantines) for c in certified), (run, certified, quarantines)
            refused = sum(got is not None and "quarantined" in got for got in
                          (results[0][i], results[1][i]))  # fmt: skip
            assert len(certified) + refused == 2
        result = st.verify()
        assert result.ok, result.problems
