"""verdict94: the ledger guard and the pinned reader compare the text a str holds.

``validate`` reads a str subclass in a ``Run`` by its characters (audit68), so a runtime's
own str type decides nothing there. The ledger guard, which must stop an effect *before* it
escapes (seed 002), compared its attempt with the ledger entry by tuple equality, in which
a subclass's own ``__eq__`` answers: a target (or payload digest) equal to everything was
admitted and ``perform`` ran the action, an effect the sealed ledger does not hold; only
validate, afterwards, read its text as an UNRECORDED_EFFECT. The pinned reader looked a
read up by the source's own ``__hash__`` and ``__eq__``, serving another source's recorded
payload. Both now take the text.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cpstore import state_digest
from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import LedgerGuardError, RecordingGapError
from cpstore.replay.session import ReplaySession
from cpstore.store.facade import open as open_store

STATE = {"memory": "x"}


class _EqualToAll(str):
    """A runtime's own str type whose comparisons say yes to everything."""

    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        return True

    def __ne__(self, other: object) -> bool:
        return False


class _PosingAs(str):
    """A str whose hash and comparisons are those of another text."""

    posing: str

    def __new__(cls, text: str, posing: str) -> _PosingAs:
        obj = super().__new__(cls, text)
        obj.posing = posing
        return obj

    def __hash__(self) -> int:
        return hash(self.posing)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and str.__eq__(self.posing, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)


def _recording(path: Path) -> str:
    with open_store(path) as store:
        rec = store.recorder("agent")
        rec.observe(1, "config", b"v1", pinned_at=100.0)
        rec.effect("db", b"w1")
        return rec.checkpoint(1, STATE, seal_ledger=True)


@pytest.mark.parametrize("lying", ["target", "digest", "both"])
def test_the_guard_refuses_an_effect_whose_text_the_ledger_does_not_hold(
    tmp_path: Path, lying: str
) -> None:
    cid = _recording(tmp_path / "s")
    target = _EqualToAll("evil") if lying in ("target", "both") else "db"
    with open_store(tmp_path / "s") as store, store.read(cid) as cp:
        session = ReplaySession(cp)
        session.observations.read(1, "config")
        ran: list[int] = []
        with pytest.raises(LedgerGuardError, match="not in the sealed ledger"):
            if lying == "target":
                session.guard.perform(target, b"w1", lambda: ran.append(1))
            else:
                session.guard.check_digest(target, _EqualToAll("00" * 16))
        assert ran == []  # nothing escaped
        attempted = session.guard.attempted
        assert len(attempted) == 1 and type(attempted[0].target) is str
        p = session.finish(state_digest(STATE))
        d = validate(cid, p, store=store, record=False)
    assert d.verdict is Verdict.QUARANTINE
    assert d.codes == {FindingCode.UNRECORDED_EFFECT}


def test_the_guard_still_admits_the_recorded_effect_given_as_a_subclass(tmp_path: Path) -> None:
    """A str subclass holding the recorded text is that text: admitted, and an ACCEPT."""
    cid = _recording(tmp_path / "s")

    class Target(str):
        pass

    with open_store(tmp_path / "s") as store, store.read(cid) as cp:
        session = ReplaySession(cp)
        session.observations.read(1, "config")
        assert session.guard.perform(Target("db"), b"w1", lambda: "done") == "done"
        p = session.finish(state_digest(STATE))
        assert validate(cid, p, store=store, record=False).verdict is Verdict.ACCEPT


def test_the_pinned_reader_serves_the_source_its_text_names(tmp_path: Path) -> None:
    cid = _recording(tmp_path / "s")
    with open_store(tmp_path / "s") as store, store.read(cid) as cp:
        session = ReplaySession(cp)
        with pytest.raises(RecordingGapError):
            session.observations.read(1, _PosingAs("other", "config"))
        # The subclass holding the recorded source's text is served it.
        assert session.observations.read(1, _PosingAs("config", "nothing")) == b"v1"
        kept = session.observations.observations
        assert [type(o.source) for o in kept] == [str, str]
        assert [o.source for o in kept] == ["other", "config"]
