"""push / pull carry a branch quarantine whose decision the source has since superseded.

The source quarantined a branch (a BEST_EFFORT replay: QUARANTINE), then validated the
checkpoint again (a STRICT ACCEPT): the checkpoint's standing decision is the ACCEPT, which
is never carried, and the branch stays quarantined in the source for good. The transfer
used to carry only standing decisions, so the destination held no decision at all and,
after a STRICT ACCEPT of its own, certified a rollback of the branch the source refuses
(docs/store.md, "push and pull").
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from test_transfer_gates import (
    PAIRS,
    _accepted,
    _checkpoint,
    _decisions,
    _quarantined,
    _rejected,
    _standing,
    _where,
)

import cpstore
from cpstore.cli import main
from cpstore.decision.gates import certify_rollback
from cpstore.errors import GateError
from cpstore.store.transfer import transfer

if TYPE_CHECKING:
    from cpstore import Store


def _refuses_rollback(store: Store, cid: str) -> None:
    with pytest.raises(GateError, match="quarantined") as err:
        certify_rollback(store, cid, _accepted(store, cid))
    assert err.value.where == "run 'r' branch 'main'"


def _round_trips_append_nothing(src: Store, dst: Store) -> None:
    """A second push and a pull back append nothing; verify is clean on both sides."""
    before = len(list(dst.audit_records())), len(list(src.audit_records()))
    assert transfer(src.backend, dst.backend).decisions == 0
    assert transfer(dst.backend, src.backend).decisions == 0
    assert (len(list(dst.audit_records())), len(list(src.audit_records()))) == before
    assert dst.verify().ok and src.verify().ok


@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS)
def test_a_superseded_quarantine_still_quarantines_the_branch_in_the_destination(
    src_kind: str, dst_kind: str, tmp_path: Path, pg_url: str
) -> None:
    """QUARANTINE then ACCEPT in the source: the quarantine is carried (the ACCEPT is not),
    the destination refuses to certify a rollback of the branch after its own STRICT ACCEPT,
    as the source does; a second push and a pull back append nothing; verify is clean."""
    src_at = _where(src_kind, tmp_path, "src", pg_url)
    dst_at = _where(dst_kind, tmp_path, "dst", pg_url)
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        cid = _checkpoint(src)
        q = _quarantined(src, cid)
        ok = _accepted(src, cid)
        assert _standing(src, cid) == ok.id
        report = transfer(src.backend, dst.backend)
        assert report.decisions == 1
        assert _decisions(dst) == [(q.id, "QUARANTINE")]
        (rec,) = dst.audit_records(kind="decision")
        assert rec.body["imported"]["index"] == 0
        assert _standing(dst, cid) == q.id  # stricter than the source's ACCEPT, never milder
        _refuses_rollback(src, cid)
        _refuses_rollback(dst, cid)
        _round_trips_append_nothing(src, dst)


@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS)
def test_the_quarantine_goes_before_a_standing_reject_it_is_superseded_by(
    src_kind: str, dst_kind: str, tmp_path: Path, pg_url: str
) -> None:
    """QUARANTINE then a plain REJECT (no QUARANTINE-level finding) in the source: both are
    carried, in the source's order, so the REJECT stands and the branch is quarantined."""
    src_at = _where(src_kind, tmp_path, "src", pg_url)
    dst_at = _where(dst_kind, tmp_path, "dst", pg_url)
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        cid = _checkpoint(src)
        q = _quarantined(src, cid)
        rej = _rejected(src, cid)
        assert transfer(src.backend, dst.backend).decisions == 2
        assert _decisions(dst) == [(q.id, "QUARANTINE"), (rej.id, "REJECT")]
        assert _standing(dst, cid) == rej.id
        _refuses_rollback(dst, cid)
        assert dst.verify().ok


@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS)
def test_nothing_extra_when_the_destination_quarantined_the_branch_or_is_stricter(
    src_kind: str, dst_kind: str, tmp_path: Path, pg_url: str
) -> None:
    """The destination quarantined the branch itself: the source's quarantine is not appended
    (its own ACCEPT stands); a destination REJECT is never replaced by a carried QUARANTINE."""
    src_at = _where(src_kind, tmp_path, "src", pg_url)
    dst_at = _where(dst_kind, tmp_path, "dst", pg_url)
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        cid = _checkpoint(src)
        transfer(src.backend, dst.backend)
        _quarantined(dst, cid)
        own = _accepted(dst, cid)
        _quarantined(src, cid)
        _accepted(src, cid)
        assert transfer(src.backend, dst.backend).decisions == 0
        assert _standing(dst, cid) == own.id
        other = _checkpoint(src, "o")
        transfer(src.backend, dst.backend)
        mine = _rejected(dst, other)
        _quarantined(src, other)
        _accepted(src, other)
        transfer(src.backend, dst.backend)  # the branch's quarantine comes, for its branch only
        assert _standing(dst, other) == mine.id
        assert dst.verify().ok


@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS)
def test_a_stricter_standing_decision_keeps_its_place_and_the_branch_is_quarantined(
    src_kind: str, dst_kind: str, tmp_path: Path, pg_url: str
) -> None:
    """The destination's own REJECT stands for the checkpoint (a carried QUARANTINE would
    be milder), yet the source quarantined the branch: the quarantine was not carried at
    all, and after a STRICT ACCEPT of its own the destination certified a rollback the
    source refuses. It is carried for its branch only (its checkpoint moved to
    ``imported``): the REJECT stays the standing decision, the branch is quarantined, a
    second push and a pull back append nothing, verify is clean on both sides."""
    src_at = _where(src_kind, tmp_path, "src", pg_url)
    dst_at = _where(dst_kind, tmp_path, "dst", pg_url)
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        cid = _checkpoint(src)
        transfer(src.backend, dst.backend)
        mine = _rejected(dst, cid)
        q = _quarantined(src, cid)
        _accepted(src, cid)
        assert transfer(src.backend, dst.backend).decisions == 1
        assert _standing(dst, cid) == mine.id
        rec = list(dst.audit_records(kind="decision"))[-1]
        assert rec.body["decision_id"] == q.id and rec.body["verdict"] == "QUARANTINE"
        assert rec.body["recorded"]["checkpoint_id"] is None
        assert rec.body["imported"]["checkpoint_id"] == cid
        assert rec.body["imported"]["branch_only"] is True
        own = _accepted(dst, cid)
        assert _standing(dst, cid) == own.id  # its own later decision stands, as ever
        _refuses_rollback(src, cid)
        _refuses_rollback(dst, cid)
        _round_trips_append_nothing(src, dst)


def test_cli_push_carries_the_superseded_quarantine(tmp_path: Path) -> None:
    """`cpstore push`: the pushed store refuses the rollback the source refuses."""
    src_at, pushed = str(tmp_path / "src"), str(tmp_path / "pushed")
    with cpstore.open(src_at) as src:
        cid = _checkpoint(src)
        _quarantined(src, cid)
        _accepted(src, cid)

    assert main(["push", pushed, "--store", src_at]) == 0
    with cpstore.open(pushed) as dst:
        _refuses_rollback(dst, cid)
