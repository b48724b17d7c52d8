"""A pinned read serves only the payload recorded: its bytes must have the recorded digest.

The replay cursor checks every token value against its record whatever the reader's
``verify``; the pinned reader trusted the reader. Through ``store.read(cid,
verify=False)`` a damaged payload object was served, while P named the recorded digest:
validated against R as a document, that replay, which read other bytes than were
recorded (seed 000's "newer config"), was an ACCEPT.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from stored import edit_raw

import cpstore
from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import IntegrityError, InvalidInputError
from cpstore.native.binding import digest
from cpstore.replay import PinnedObservations, ReplaySession
from cpstore.run.model import Observation, Run
from cpstore.store.facade import open as open_store

STATE = b"state"


def test_a_damaged_payload_read_unverified_is_never_served(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with open_store(path) as store:
        rec = store.recorder("r")
        rec.observe(1, "cfg", b"config-v1", pinned_at=1.0)
        cid = rec.checkpoint(1, STATE)
        rec.close()
        with store.read(cid) as cp:
            observations = cp.observations()
            recorded = Run(
                "r",
                1,
                cp.manifest.state_digest,
                observations=tuple(Observation(*o) for o in observations),
                ledger_sealed=cp.manifest.ledger_sealed,
            )
    key = bytes.fromhex(observations[0][2])
    edit_raw(path, "objects", key, lambda old: old[:-1] + bytes([old[-1] ^ 0x01]))  # v1 -> v0
    with open_store(path) as store:
        with store.read(cid, verify=False) as cp:
            # A whole session refuses such a reader (review70: its ledger guard would take
            # the ledger unchecked); the pinned reader on its own checks each payload.
            with pytest.raises(InvalidInputError, match="verify=False"):
                ReplaySession(cp)
            pinned = PinnedObservations(cp)
            with pytest.raises(IntegrityError, match="recorded digest") as told:
                pinned.read(1, "cfg")  # before: b"config-v0"
            assert told.value.expected == observations[0][2]
        with store.read(cid) as cp:
            replay = ReplaySession(cp).finish(cpstore.state_digest(STATE))
        assert replay.observations == ()  # nothing served, nothing claimed
        decision = validate(recorded, replay)  # before: ACCEPT
        assert decision.verdict is Verdict.REJECT
        assert FindingCode.OBSERVATION_MISMATCH in decision.codes


class _Source:
    """A PayloadSource whose second payload is not the one its digest names."""

    def observations(self) -> Sequence[tuple[int, str, str, float | None]]:
        return [(2, "tool", digest(b"a").hex(), 1.0), (2, "tool", digest(b"b").hex(), 1.0)]

    def payload(self, step: int, source: str, *, occurrence: int = 0) -> bytes:
        return [b"a", b"not b"][occurrence]


def test_any_source_is_held_to_its_digests() -> None:
    reads = PinnedObservations(_Source())
    assert reads.read(2, "tool") == b"a"
    with pytest.raises(IntegrityError) as told:
        reads.read(2, "tool")
    assert told.value.where == "step 2, source 'tool', occurrence 1"
    assert [o.payload_digest for o in reads.observations] == [digest(b"a").hex()]
