"""push / pull onward of a quarantine carried for its branch only (transfer_gates._branch_only).

Store B holds its own REJECT for a checkpoint and gets A's quarantine of the branch for
the branch only (``recorded.checkpoint_id`` nil, the id in ``imported``): B refuses a
rollback of the branch, as A does. Pulled on from B into a third store C, that record was
about no checkpoint, so no carry picked it up (carried_decisions keys a record by the
checkpoint it is about): C got the branch unquarantined and, after a STRICT ACCEPT of its
own, certified a rollback of a branch A and B both refuse (a wrong permit one hop on).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from test_transfer_gates import PAIRS, _accepted, _checkpoint, _quarantined, _rejected, _where
from test_transfer_quarantine import _refuses_rollback

import cpstore
from cpstore.cli import main
from cpstore.decision.gates import sign_off
from cpstore.errors import SignOffError
from cpstore.store.transfer import transfer

if TYPE_CHECKING:
    from cpstore import Store


def _branch_only_in(a: Store, b: Store) -> tuple[str, str]:
    """A checkpoint of A's branch in B with B's own REJECT, then A's quarantine of the
    branch carried into B for its branch only; (checkpoint id, quarantine id)."""
    cid = _checkpoint(a)
    transfer(a.backend, b.backend)
    _rejected(b, cid)
    q = _quarantined(a, cid)
    assert transfer(a.backend, b.backend).decisions == 1
    rec = list(b.audit_records(kind="decision"))[-1]
    assert rec.body["imported"]["branch_only"] is True
    return cid, q.id


def _records(store: Store) -> int:
    return len(list(store.audit_records()))


@pytest.mark.parametrize("settled_in_b", [False, True])
@pytest.mark.parametrize(("b_kind", "c_kind"), PAIRS)
def test_a_branch_only_quarantine_is_carried_on_for_its_branch_only(
    b_kind: str, c_kind: str, settled_in_b: bool, tmp_path: Path, pg_url: str
) -> None:
    """A -> B -> C: C refuses the rollback A and B refuse, holds the record for its branch
    only (its checkpoint id still named), appends nothing more on a second pull, a pull back
    into B or A appends nothing, verify is clean everywhere. ``settled_in_b``: B has since
    accepted the checkpoint itself (no standing decision left to carry)."""
    b_at = _where(b_kind, tmp_path, "b", pg_url)
    c_at = _where(c_kind, tmp_path, "c", pg_url)
    with (
        cpstore.open(str(tmp_path / "a")) as a,
        cpstore.open(b_at) as b,
        cpstore.open(c_at) as c,
    ):
        cid, q = _branch_only_in(a, b)
        if settled_in_b:
            _accepted(b, cid)
        transfer(b.backend, c.backend)
        carried = [r for r in c.audit_records(kind="decision") if r.body["decision_id"] == q]
        assert len(carried) == 1, [r.body for r in c.audit_records(kind="decision")]
        (rec,) = carried
        assert rec.body["recorded"]["checkpoint_id"] is None
        assert rec.body["imported"]["branch_only"] is True
        assert rec.body["imported"]["checkpoint_id"] == cid
        _refuses_rollback(c, cid)  # C's own STRICT ACCEPT, then the rollback: refused
        _refuses_rollback(b, cid)
        _refuses_rollback(a, cid)
        before = _records(a), _records(b), _records(c)
        assert transfer(b.backend, c.backend).decisions == 0
        assert transfer(c.backend, b.backend).decisions == 0
        assert transfer(c.backend, a.backend).decisions == 0
        assert (_records(a), _records(b), _records(c)) == before
        assert a.verify().ok and b.verify().ok and c.verify().ok


def test_cpstore_audit_says_what_a_branch_only_quarantine_quarantines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`cpstore audit` listed a branch-only quarantine as "QUARANTINE decision ... checkpoint
    -": an operator could not tell it quarantines a branch, nor which, nor what it was about
    in its source. The line now names the run and branch and the source's checkpoint."""
    b_at = str(tmp_path / "b")
    with cpstore.open(str(tmp_path / "a")) as a, cpstore.open(b_at) as b:
        cid, q = _branch_only_in(a, b)
    capsys.readouterr()
    assert main(["audit", "--store", b_at]) == 0
    (line,) = [ln for ln in capsys.readouterr().out.splitlines() if q in ln]
    assert "QUARANTINE" in line and "checkpoint -" in line
    assert "branch only" in line and "run 'r' branch 'main'" in line and cid in line


def test_a_sign_off_of_a_branch_only_quarantine_says_why_there_is_nothing_to_release(
    tmp_path: Path,
) -> None:
    """An operator who names the branch-only quarantine (its id, as `cpstore audit` lists
    it) to sign it off was told "not about a stored checkpoint" of a QUARANTINE about a
    checkpoint the store holds; now told it was carried for its branch only, and nothing is
    appended."""
    with cpstore.open(str(tmp_path / "a")) as a, cpstore.open(str(tmp_path / "b")) as b:
        cid, q = _branch_only_in(a, b)
        before = _records(b)
        with pytest.raises(SignOffError, match="carried for its branch only") as err:
            sign_off(b, q, operator="op", reason="looked at it")
        assert cid in str(err.value.got)
        assert _records(b) == before


@pytest.mark.parametrize(("b_kind", "c_kind"), PAIRS)
def test_a_branch_only_quarantine_of_a_pruned_checkpoint_is_carried_with_its_branch(
    b_kind: str, c_kind: str, tmp_path: Path, pg_url: str
) -> None:
    """B pruned the checkpoint its branch-only quarantine names: pulled on into C, the
    quarantine goes with the branch (carried aside), branch only, and C refuses a
    rollback of the branch's head as A and B do."""
    b_at = _where(b_kind, tmp_path, "b", pg_url)
    c_at = _where(c_kind, tmp_path, "c", pg_url)
    with (
        cpstore.open(str(tmp_path / "a")) as a,
        cpstore.open(b_at) as b,
        cpstore.open(c_at) as c,
    ):
        rec = a.recorder("r")
        rec.observe(1, "clock", b"t", pinned_at=1.0)
        rec.token("rng", 1)
        old = str(rec.checkpoint(1, b"state"))
        rec.observe(2, "clock", b"u", pinned_at=2.0)
        head = str(rec.checkpoint(2, b"state2"))
        transfer(a.backend, b.backend)
        _rejected(b, old)
        q = _quarantined(a, old)
        assert transfer(a.backend, b.backend).decisions == 1
        assert b.prune(keep_last=1) == 1  # B sweeps the checkpoint the quarantine names
        _refuses_rollback(b, head)
        transfer(b.backend, c.backend)
        (got,) = [r for r in c.audit_records(kind="decision") if r.body["decision_id"] == q.id]
        assert got.body["imported"]["branch_only"] is True
        assert got.body["imported"]["checkpoint_id"] == old
        _refuses_rollback(c, head)
        assert transfer(b.backend, c.backend).decisions == 0
        assert c.verify().ok and b.verify().ok
