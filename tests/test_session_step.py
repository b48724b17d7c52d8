"""``ReplaySession.finish(step=)``: the step the replay reached is compared, not copied.

audit68 found that ``finish`` always took the checkpoint's step, so a runtime whose
replay stopped at another step could not say so and STEP_MISMATCH never fired through
a session. Omitted, the checkpoint's step is still taken.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Iterator
from pathlib import Path

import pytest

import cpstore
from cpstore.errors import InvalidInputError


@contextlib.contextmanager
def _session(store: cpstore.Store) -> Iterator[tuple[str, cpstore.ReplaySession]]:
    """A checkpoint at step 3 and a strict replay of it that resolved its one token."""
    rec = store.recorder("r")
    rec.token("rng", 1)
    cid = str(rec.checkpoint(3, {"a": 1}))
    with store.read(cid) as cp:
        session = cpstore.ReplaySession(cp)
        session.cursor.resolve("rng")
        yield cid, session


@pytest.mark.parametrize(("step", "verdict"), [(None, "ACCEPT"), (3, "ACCEPT"), (2, "REJECT")])
def test_the_step_reached_is_compared(tmp_path: Path, step: int | None, verdict: str) -> None:
    with cpstore.open(str(tmp_path / "s")) as store:
        with _session(store) as (cid, session):
            run = session.finish(cpstore.state_digest({"a": 1}), step=step)
        d = cpstore.validate(cid, run, store=store)
        assert d.verdict.name == verdict
        codes = {f.code.value for f in d.findings}
        assert ("STEP_MISMATCH" in codes) == (verdict == "REJECT")


def test_a_written_replay_carries_the_step_reached(tmp_path: Path) -> None:
    with cpstore.open(str(tmp_path / "s")) as store:
        with _session(store) as (cid, session):
            buf = io.BytesIO()
            session.write(buf, cpstore.state_digest({"a": 1}), step=4)
        d = cpstore.validate(cid, cpstore.load_document(buf.getvalue()), store=store)
        assert d.verdict.name == "REJECT"
        assert [f.code.value for f in d.findings] == ["STEP_MISMATCH"]


@pytest.mark.parametrize("bad", [-1, True, 1.0, "3"])
def test_a_bad_step_is_bad_input(tmp_path: Path, bad: object) -> None:
    with (
        cpstore.open(str(tmp_path / "s")) as store,
        _session(store) as (_, session),
        pytest.raises(InvalidInputError),
    ):
        session.finish(cpstore.state_digest({"a": 1}), step=bad)  # type: ignore[arg-type]
