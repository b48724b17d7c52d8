"""push / pull carry a branch quarantine whose checkpoint the transfer does not land.

A branch quarantine is about the run and branch (``quarantined/<pair>``, for good), but
the transfer carried decisions only about checkpoints of the landed lineage. Retention
in the source (prune, gc) sweeps old checkpoints and keeps the audit log: a branch whose
quarantined checkpoint was pruned stayed quarantined in the source and arrived without
it, and the destination certified a rollback of the branch that the source refuses.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from test_transfer_gates import PAIRS, _accepted, _decisions, _quarantined, _where
from test_transfer_quarantine import _refuses_rollback

import cpstore
from cpstore.errors import StoreError
from cpstore.store.transfer import transfer


def _two_checkpoints(store: cpstore.Store) -> tuple[str, str]:
    rec = store.recorder("r")
    rec.observe(1, "clock", b"t", pinned_at=1.0)
    rec.token("rng", 1)
    first = str(rec.checkpoint(1, b"state"))
    rec.observe(2, "clock", b"u", pinned_at=2.0)
    return first, str(rec.checkpoint(2, b"state2"))


@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS)
@pytest.mark.parametrize("superseded", [False, True])
def test_a_quarantine_of_a_pruned_checkpoint_still_quarantines_the_branch(
    src_kind: str, dst_kind: str, superseded: bool, tmp_path: Path, pg_url: str
) -> None:
    src_at = _where(src_kind, tmp_path, "src", pg_url)
    dst_at = _where(dst_kind, tmp_path, "dst", pg_url)
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        old, head = _two_checkpoints(src)
        q = _quarantined(src, old)
        if superseded:
            _accepted(src, old)
        assert src.prune(keep_last=1) == 1  # the quarantined checkpoint is swept
        _refuses_rollback(src, head)
        report = transfer(src.backend, dst.backend)
        assert report.decisions == 1
        assert (q.id, "QUARANTINE") in _decisions(dst)
        _refuses_rollback(dst, head)  # certified a rollback before
        assert transfer(src.backend, dst.backend).decisions == 0  # carried once
        assert transfer(dst.backend, src.backend).decisions == 0
        assert dst.verify().ok and src.verify().ok


def test_a_keyed_destination_takes_the_aside_quarantine_only_with_its_key(
    tmp_path: Path,
) -> None:
    """The carried-aside quarantine counts as a decision to carry: a keyed destination
    opened without its key is refused before anything is copied; with it, it is carried
    (MAC and all) and verify is clean."""
    key = b"k" * 32
    with cpstore.open(str(tmp_path / "d"), audit_key=key):
        pass
    with cpstore.open(str(tmp_path / "s")) as src:
        old, head = _two_checkpoints(src)
        _quarantined(src, old)
        assert src.prune(keep_last=1) == 1
        with cpstore.open(str(tmp_path / "d")) as dst:
            with pytest.raises(StoreError, match="keyed"):
                transfer(src.backend, dst.backend)
            assert dst.ref("r") is None
        with cpstore.open(str(tmp_path / "d"), audit_key=key) as dst:
            assert transfer(src.backend, dst.backend).decisions == 1
            _refuses_rollback(dst, head)
            assert dst.verify().ok
