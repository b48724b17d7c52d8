"""push / pull carry the source's standing non-ACCEPT decisions: the gates hold in the destination.

A QUARANTINE or REJECT checkpoint used to arrive with no decision, and the destination let
anyone record on from it and certify rollbacks of its branch (docs/store.md, "push and pull").
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from test_decision_support import stored_replay

import cpstore
from cpstore.cli import main
from cpstore.decision.gates import certify_rollback, resume_gate, sign_off
from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import ConflictError, GateError, NotFoundError, StoreError
from cpstore.run.model import ReplayMode
from cpstore.store import transfer_gates
from cpstore.store.transfer import transfer

if TYPE_CHECKING:
    from cpstore import Decision, Store

PAIRS = [("lmdb", "pg"), ("pg", "lmdb")]
KEY = b"k" * 32


def _where(kind: str, tmp_path: Path, name: str, url: str) -> str:
    return str(tmp_path / name) if kind == "lmdb" else url.replace("schema=", f"schema={name}_")


def _checkpoint(store: Store, run: str = "r") -> str:
    rec = store.recorder(run)
    rec.observe(1, "clock", b"t", pinned_at=1.0)
    rec.token("rng", 1)
    return str(rec.checkpoint(1, b"state"))


def _quarantined(store: Store, cid: str) -> Decision:
    d = validate(cid, stored_replay(store, cid, mode=ReplayMode.BEST_EFFORT), store=store)
    assert d.verdict is Verdict.QUARANTINE
    return d


def _rejected(store: Store, cid: str) -> Decision:
    d = validate(cid, stored_replay(store, cid, state_digest="other"), store=store)
    assert d.verdict is Verdict.REJECT
    return d


def _accepted(store: Store, cid: str) -> Decision:
    d = validate(cid, stored_replay(store, cid), store=store)
    assert d.verdict is Verdict.ACCEPT
    return d


def _decisions(store: Store) -> list[tuple[str, str]]:
    records = store.audit_records(kind="decision")
    return [(r.body["decision_id"], r.body["verdict"]) for r in records]


def _standing(store: Store, cid: str) -> object:
    with store.audit_view() as log:
        rec = log.latest_decision(cid)
    return None if rec is None else rec.body["decision_id"]


def _refusal(store: Store, cid: str, d: Decision) -> str:
    with pytest.raises(GateError) as err:
        resume_gate(store, cid, d.id)
    return err.value.what


@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS)
def test_a_quarantined_checkpoint_arrives_quarantined(
    src_kind: str, dst_kind: str, tmp_path: Path, pg_url: str
) -> None:
    """No recording on or forking without a permit, resume_gate asks for a sign-off as in the
    source, rollback certification refused (the branch was quarantined), verify clean; the
    destination's own sign-off then lets one resume through."""
    src_at = _where(src_kind, tmp_path, "src", pg_url)
    dst_at = _where(dst_kind, tmp_path, "dst", pg_url)
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        cid = _checkpoint(src)
        d = _quarantined(src, cid)
        report = transfer(src.backend, dst.backend)
        with pytest.raises(GateError, match="permit"):
            dst.recorder("r")
        assert report.decisions == 1
        with pytest.raises(GateError):
            dst.recorder("r", branch="retry", parent=cid)
        assert dst.ref("r", "retry") is None
        assert _refusal(dst, cid, d) == _refusal(src, cid, d)
        (rec,) = dst.audit_records(kind="decision")
        source_rec = next(iter(src.audit_records(kind="decision")))
        assert rec.body["decision_id"] == d.id and rec.body["verdict"] == "QUARANTINE"
        assert rec.body["imported"]["audit"] == source_rec.digest
        assert rec.body["imported"]["index"] == source_rec.index
        with pytest.raises(GateError, match="quarantined"):
            certify_rollback(dst, cid, _accepted(dst, cid))
        with pytest.raises(GateError, match="quarantined"):
            certify_rollback(src, cid, _accepted(src, cid))
        assert dst.verify().ok


@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS)
def test_a_rejected_checkpoint_arrives_rejected_and_a_dest_sign_off_is_its_own(
    src_kind: str, dst_kind: str, tmp_path: Path, pg_url: str
) -> None:
    """REJECT: refused as in the source (not releasable); a QUARANTINE carried needs the
    destination's own sign-off (the source's is not carried), which releases one resume."""
    src_at = _where(src_kind, tmp_path, "src", pg_url)
    dst_at = _where(dst_kind, tmp_path, "dst", pg_url)
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        bad = _checkpoint(src, "bad")
        rej = _rejected(src, bad)
        meh = _checkpoint(src, "meh")
        q = _quarantined(src, meh)
        sign_off(src, q, operator="alice", reason="seen")
        transfer(src.backend, dst.backend)
        with pytest.raises(GateError, match="REJECT"):
            dst.recorder("bad")
        assert _refusal(dst, bad, rej) == _refusal(src, bad, rej)
        assert list(dst.audit_records(kind="signoff")) == []
        with pytest.raises(GateError, match="sign-off"):
            resume_gate(dst, meh, q.id)
        so = sign_off(dst, q.id, operator="bob", reason="checked here")
        permit = resume_gate(dst, meh, q.id, sign_off=so)
        dst.recorder("meh", permit=permit).checkpoint(2, b"next")
        assert dst.verify().ok


@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS)
def test_accept_is_not_carried_and_a_second_transfer_appends_nothing(
    src_kind: str, dst_kind: str, tmp_path: Path, pg_url: str
) -> None:
    """An ACCEPT arrives with no decision; a re-push, and a pull back, append nothing."""
    src_at = _where(src_kind, tmp_path, "src", pg_url)
    dst_at = _where(dst_kind, tmp_path, "dst", pg_url)
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        ok = _checkpoint(src, "ok")
        _accepted(src, ok)
        bad = _checkpoint(src, "bad")
        _rejected(src, bad)
        assert transfer(src.backend, dst.backend).decisions == 1
        assert [v for _, v in _decisions(dst)] == ["REJECT"]
        dst.recorder("ok").checkpoint(2, b"on")  # no decision here: no permit needed
        before_dst, before_src = len(list(dst.audit_records())), len(list(src.audit_records()))
        src.recorder("ok").checkpoint(3, b"later")  # moves a branch; "bad" is unchanged
        with pytest.raises(ConflictError, match="elsewhere"):
            transfer(src.backend, dst.backend)
        assert len(list(dst.audit_records())) == before_dst
        assert transfer(src.backend, dst.backend, run_id="bad").decisions == 0
        assert transfer(dst.backend, src.backend, run_id="bad").decisions == 0
        assert len(list(dst.audit_records())) == before_dst
        assert len(list(src.audit_records())) == before_src


@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS)
def test_a_destination_decision_is_never_made_milder(
    src_kind: str, dst_kind: str, tmp_path: Path, pg_url: str
) -> None:
    """A destination REJECT is not superseded by a carried QUARANTINE; a destination's own
    later decision stands after a re-push; a new source decision is carried."""
    src_at = _where(src_kind, tmp_path, "src", pg_url)
    dst_at = _where(dst_kind, tmp_path, "dst", pg_url)
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        cid = _checkpoint(src)
        transfer(src.backend, dst.backend)
        own = _rejected(dst, cid)
        _quarantined(src, cid)
        # Carried for its branch only (test_transfer_quarantine.py): the REJECT stands.
        assert transfer(src.backend, dst.backend).decisions == 1
        assert _standing(dst, cid) == own.id
        assert transfer(src.backend, dst.backend).decisions == 0
        assert dst.verify().ok
        with pytest.raises(GateError, match="quarantined"):  # the branch is, as in the source
            certify_rollback(dst, cid, _accepted(dst, cid))
        # Another checkpoint: carried QUARANTINE, then the destination's own REJECT.
        other = _checkpoint(src, "o")
        _quarantined(src, other)
        assert transfer(src.backend, dst.backend).decisions == 1
        later = _rejected(dst, other)
        assert transfer(src.backend, dst.backend).decisions == 0
        assert _standing(dst, other) == later.id
        # The source decides again (REJECT): carried, stricter than the carried QUARANTINE.
        newer = _rejected(src, other)
        assert transfer(src.backend, dst.backend).decisions == 1
        assert _standing(dst, other) == newer.id
        assert dst.verify().ok


def test_a_keyed_destination_without_its_key_is_refused_before_anything_is_copied(
    tmp_path: Path,
) -> None:
    """transfer and `cpstore push` to a keyed log opened without the key: StoreError / exit
    exit 7, no run lands; with the key (the API) the decision is carried, MAC and all."""
    src_at, dst_at = tmp_path / "src", tmp_path / "dst"
    with cpstore.open(dst_at, audit_key=KEY) as dst:
        _rejected(dst, _checkpoint(dst, "own"))
    with cpstore.open(src_at) as src:
        cid = _checkpoint(src)
        _quarantined(src, cid)
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        with pytest.raises(StoreError, match="keyed"):
            transfer(src.backend, dst.backend)
        assert dst.runs() == ["own"]
    assert main(["push", str(dst_at), "--store", str(src_at)]) == 7
    with cpstore.open(src_at) as src, cpstore.open(dst_at, audit_key=KEY) as dst:
        assert dst.runs() == ["own"]
        assert transfer(src.backend, dst.backend).decisions == 1
        with pytest.raises(GateError, match="permit"):
            dst.recorder("r")
        assert dst.verify().ok


def test_cli_push_and_pull_carry_the_decision(tmp_path: Path) -> None:
    """`cpstore push` and `cpstore pull`: the destination refuses recording on, as the source."""
    src_at, pushed, pulled = (str(tmp_path / n) for n in ("src", "pushed", "pulled"))
    with cpstore.open(src_at) as src:
        cid = _checkpoint(src)
        _rejected(src, cid)
    assert main(["push", pushed, "--store", src_at]) == 0
    assert main(["pull", src_at, "--store", pulled]) == 0
    for at in (pushed, pulled):
        with cpstore.open(at) as dst:
            with pytest.raises(GateError, match="permit"):
                dst.recorder("r")
            assert [v for _, v in _decisions(dst)] == ["REJECT"]


@pytest.mark.parametrize("dst_kind", ["lmdb", "pg"])
def test_a_checkpoint_never_lands_without_its_decision(
    dst_kind: str, tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The decision is appended in the branch's landing txn: an append that fails (a crash
    in its place) leaves neither the checkpoint nor the ref; the next transfer lands both."""
    dst_at = _where(dst_kind, tmp_path, "dst", pg_url)
    with cpstore.open(tmp_path / "src") as src, cpstore.open(dst_at) as dst:
        cid = _checkpoint(src)
        _rejected(src, cid)

        def broken(*_args: object, **_kw: object) -> None:
            raise RuntimeError("killed while appending the carried decision")

        with monkeypatch.context() as m:
            m.setattr(transfer_gates, "append_audit_txn", broken)
            with pytest.raises(RuntimeError, match="killed"):
                transfer(src.backend, dst.backend)
        assert dst.runs() == [] and list(dst.audit_records()) == []
        with pytest.raises(NotFoundError):
            dst.manifest(cid)
        report = transfer(src.backend, dst.backend)
        assert (report.checkpoints, report.decisions, dst.ref("r")) == (1, 1, cid)
        with pytest.raises(GateError, match="permit"):
            dst.recorder("r")
