"""verdict94: a decision about a checkpoint that cannot be read names the id that was read.

When the store cannot give a side (a missing checkpoint, damage met before the side is
built), the decision still names the checkpoint, so that its REJECT (INTEGRITY) stands as
that checkpoint's decision. The side was read by the id's characters (``full_checkpoint_id``)
but named by the str's own ``lower()``: a runtime's id type answering another id there made
the REJECT another checkpoint's standing decision (a healthy one refused to resume) while
the checkpoint that could not be read kept its earlier decision. LMDB and PostgreSQL.
"""

from __future__ import annotations

from pg_cluster import backend_store  # noqa: F401 - fixture
from test_decision_support import clean_doc, replay_of

from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.store.facade import Store

MISSING = "ab" * 16


def test_the_unreadable_checkpoint_is_the_one_the_decision_names(store: Store) -> None:
    rec = store.recorder("agent")
    rec.token("rng", 1)
    healthy = rec.checkpoint(1, {"memory": "x"}, seal_ledger=True)

    class RuntimeId(str):
        """An id type whose lower() answers another checkpoint."""

        def lower(self) -> str:
            return healthy

    for side in ("recorded", "replayed"):
        missing = RuntimeId(MISSING)
        args = (missing, replay_of(clean_doc())) if side == "recorded" else (healthy, missing)
        d = validate(*args, store=store)
        assert d.verdict is Verdict.REJECT and FindingCode.INTEGRITY in d.codes
        subject = d.recorded if side == "recorded" else d.replayed
        assert subject.checkpoint_id == MISSING
    # Recorded, the REJECT of the checkpoint that could not be read is its standing
    # decision (it was the healthy checkpoint's).
    with store.audit_view() as log:
        standing = log.latest_decision(MISSING)
        assert standing is not None
        assert standing.body["recorded"]["checkpoint_id"] == MISSING
