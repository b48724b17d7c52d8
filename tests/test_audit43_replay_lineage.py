"""audit43: a replay cpstore's own ReplaySession produced is marked as a replay.

Seed 004's recursion guard rejects a recording that is itself a replay, found by a
``replay:`` provenance tag (REPLAY_OF_REPLAY: REJECT, no sign-off releases it).
``ReplaySession.finish()`` (and ``write()``, the documented way to hand a replay to
another process) built P with no tag at all, so the run of a replay, validated as the
*recording* of a later replay, was only a QUARANTINE (LEDGER_UNSEALED: the session's
run says nothing of sealing), which a sign-off releases; and the same replay exported
as a document with ``ledger_sealed`` true (the checkpoint's ledger was sealed) was an
ACCEPT, FAITHFUL, evidence. P's own tags are never compared, so the tag changes no
verdict where the session's run is P.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.replay.session import ReplaySession
from cpstore.run.document import dump_document, load_document
from cpstore.run.model import Run
from cpstore.store.facade import open as open_store


def _record(path: Path) -> tuple[str, Run, bytes]:
    """A clean checkpoint, its faithful STRICT replay P1, and P1 written as a .cprun."""
    with open_store(path) as store:
        rec = store.recorder("run")
        rec.observe(1, "read_config", b"cfg-v1", pinned_at=100.0)
        rec.token("rng", 5)
        rec.decision(1, "plan", tool="search")
        rec.effect("db", b"write-1")
        rec.transcript(b"hello")
        cid = rec.checkpoint(2, {"a": 1}, tags=["agent:v1"])
        rec.close()
        with store.read(cid) as cp:
            s = ReplaySession(cp)
            s.observations.read(1, "read_config")
            s.cursor.resolve("rng")
            s.decision(1, "plan", tool="search")
            s.guard.check("db", b"write-1")
            s.cursor.assert_fully_consumed()
            state, transcript = cp.manifest.state_digest, cp.manifest.transcript_digest
            p1 = s.finish(state, transcript_digest=transcript)
            out = io.BytesIO()
            s.write(out, state, transcript_digest=transcript)
        return cid, p1, out.getvalue()


def test_the_session_marks_its_replay_with_the_checkpoint_it_replays(tmp_path: Path) -> None:
    cid, p1, raw = _record(tmp_path / "s")
    assert f"replay:{cid}" in p1.provenance_tags
    assert f"replay:{cid}" in load_document(raw).provenance_tags


def test_a_replay_validated_as_the_recording_of_a_replay_is_rejected(tmp_path: Path) -> None:
    # P2 replays P1 faithfully (here: the same streams, STRICT). Before audit43: the
    # first two QUARANTINE (LEDGER_UNSEALED only), the third ACCEPT / FAITHFUL.
    _, p1, raw = _record(tmp_path / "s")
    exported = json.loads(dump_document(p1, encoding="json"))
    exported["ledger_sealed"] = True
    for recorded in (p1, load_document(raw), load_document(json.dumps(exported).encode())):
        d = validate(recorded, p1)
        assert d.verdict is Verdict.REJECT, d.findings
        assert FindingCode.REPLAY_OF_REPLAY in d.codes
        assert not d.releasable and not d.evidence


def test_the_mark_changes_nothing_where_the_session_replay_is_p(tmp_path: Path) -> None:
    cid, p1, raw = _record(tmp_path / "s")
    with open_store(tmp_path / "s") as store:
        for replayed in (p1, load_document(raw)):
            d = validate(cid, replayed, store=store, record=False)
            assert d.verdict is Verdict.ACCEPT and d.evidence, d.findings
