"""Current behaviour audit59 reports as policy questions (the docs do not decide them).

These pin what happens today so a change is deliberate; none is a wrong ACCEPT of
something the replay was served or performed:

1. A finished ReplaySession stays usable: what the replay does after ``finish()`` is in
   a second ``finish()``, not in the first (already validated) run.
2. A request refused as *bad input* (``InvalidInputError``: a kind with no UTF-8 form)
   is not kept in P, unlike a divergence (``ReplayDivergenceError``, kept since
   audit31): a replay that swallows it and goes on faithfully is an ACCEPT. Nothing
   was served for it.
3. A read or an effect refused as a divergence whose source or target has no UTF-8
   form *is* kept, and then ``finish()`` raises ``DocumentError`` naming it: such a
   replay cannot be finished (so it is never an ACCEPT either).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

import cpstore
from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import (
    DocumentError,
    InvalidInputError,
    LedgerGuardError,
    RecordingGapError,
)
from cpstore.replay import ReplaySession
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store

STATE = b"state"


@pytest.fixture
def recorded(tmp_path: Path) -> Iterator[tuple[Store, str]]:
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("run")
        rec.token("rng", 7)
        rec.token("clock", 1.5)
        rec.observe(3, "cfg", b"v1", pinned_at=100.0)
        rec.effect("db", b"w1")
        rec.decision(3, "select", tool="x")
        yield store, rec.checkpoint(3, STATE)


def _faithful(session: ReplaySession) -> None:
    assert session.cursor.resolve("rng") == 7
    assert session.cursor.resolve("clock") == 1.5
    assert session.observations.read(3, "cfg") == b"v1"
    session.guard.check("db", b"w1")
    session.decision(3, "select", tool="x")


def _verdict(store: Store, cid: str, session: ReplaySession) -> Verdict:
    run = session.finish(cpstore.state_digest(STATE))
    return validate(cid, run, store=store, record=False).verdict


def test_a_finished_session_goes_on_and_only_a_later_finish_shows_it(
    recorded: tuple[Store, str],
) -> None:
    store, cid = recorded
    with store.read(cid) as cp:
        session = ReplaySession(cp)
        _faithful(session)
        assert _verdict(store, cid, session) is Verdict.ACCEPT
        session.observe_live(4, "cfg", b"v2")  # not refused after finish()
        session.harness_access("lockfile")
        assert _verdict(store, cid, session) is Verdict.REJECT


def test_a_swallowed_bad_input_request_is_not_kept(recorded: tuple[Store, str]) -> None:
    store, cid = recorded
    with store.read(cid) as cp:
        session = ReplaySession(cp)
        with contextlib.suppress(InvalidInputError):
            session.cursor.resolve("\udcff")
        _faithful(session)
        assert _verdict(store, cid, session) is Verdict.ACCEPT


@pytest.mark.parametrize("what", ["read", "effect"])
def test_a_kept_refusal_with_no_utf8_name_makes_the_replay_unfinishable(
    recorded: tuple[Store, str], what: str
) -> None:
    store, cid = recorded
    with store.read(cid) as cp:
        session = ReplaySession(cp)
        _faithful(session)
        with contextlib.suppress(RecordingGapError, LedgerGuardError):
            if what == "read":
                session.observations.read(3, "\udcff")
            else:
                session.guard.check("\udcff", b"x")
        with pytest.raises(DocumentError, match="lone surrogate"):
            session.finish(cpstore.state_digest(STATE))
