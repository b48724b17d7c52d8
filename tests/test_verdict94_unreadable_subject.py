"""verdict94: a decision about a checkpoint that cannot be read names the id that was read.

When the store cannot give a side (damage met before the side is built), the decision
still names the checkpoint, so that its REJECT (INTEGRITY) stands as that checkpoint's
decision. The side was read by the id's characters (``full_checkpoint_id``) but named by
the str's own ``lower()``: a runtime's id type answering another id there made the REJECT
another checkpoint's standing decision (a healthy one refused to resume) while the
checkpoint that could not be read kept its earlier decision. A checkpoint id the store
does not hold is NotFoundError since cli99 (no decision at all): it names the id read
too, and leaves the healthy checkpoint without a decision. LMDB and PostgreSQL (the
damaged side: LMDB, its data file edited).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pg_cluster import backend_store  # noqa: F401 - fixture
from test_decision_support import clean_doc, replay_of, unreadable_checkpoint

from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import NotFoundError
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store

MISSING = "ab" * 16


def _runtime_id(value: str, other: str) -> str:
    class RuntimeId(str):
        """An id type whose lower() answers another checkpoint."""

        def lower(self) -> str:
            return other

    return RuntimeId(value)


def _healthy(store: Store) -> str:
    rec = store.recorder("agent")
    rec.token("rng", 1)
    return rec.checkpoint(1, {"memory": "x"}, seal_ledger=True)


def test_a_missing_checkpoint_is_not_found_by_the_id_read(store: Store) -> None:
    healthy = _healthy(store)
    for side in ("recorded", "replayed"):
        missing = _runtime_id(MISSING, healthy)
        args = (missing, replay_of(clean_doc())) if side == "recorded" else (healthy, missing)
        with pytest.raises(NotFoundError) as told:
            validate(*args, store=store)
        assert told.value.got == MISSING
    with store.audit_view() as log:  # nothing recorded: the healthy one has no REJECT
        assert log.latest_decision(healthy) is None
        assert log.latest_decision(MISSING) is None


def test_the_unreadable_checkpoint_is_the_one_the_decision_names(tmp_path: Path) -> None:
    gone = unreadable_checkpoint(tmp_path / "s")
    with open_store(tmp_path / "s") as store:
        healthy = _healthy(store)
        for side in ("recorded", "replayed"):
            damaged = _runtime_id(gone, healthy)
            args = (damaged, replay_of(clean_doc())) if side == "recorded" else (healthy, damaged)
            d = validate(*args, store=store)
            assert d.verdict is Verdict.REJECT and FindingCode.INTEGRITY in d.codes
            subject = d.recorded if side == "recorded" else d.replayed
            assert subject.checkpoint_id == gone
        # Recorded, the REJECT of the checkpoint that could not be read is its standing
        # decision (it was the healthy checkpoint's).
        with store.audit_view() as log:
            standing = log.latest_decision(gone)
            assert standing is not None
            assert standing.body["recorded"]["checkpoint_id"] == gone
