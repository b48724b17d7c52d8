"""verdict94: a replay cursor's kept refusal never equals the recorded token.

A request the cursor refuses stays in P at its position, with the kind asked for and the
value None (audit31; a colliding kind name too since audit68), so a replay that swallows
the refusal is never equal to its recording there. A name sharing the recorded token's
31-bit hashed code has that token's code, so its kept refusal was the recording's own
record byte for byte wherever the recorded value was None: a replay that asked for the
other kind at R's last token, swallowed the ReplayDivergenceError and finished was an
ACCEPT, as a Run, a document and a ``.cprun``. Now such a refusal is kept with the value
``{"refused_kind": <the name asked>}``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_decision_cli import cli
from test_decision_support import colliding_kinds

from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import ReplayDivergenceError
from cpstore.replay.cursor import ReplayCursor
from cpstore.replay.session import ReplaySession
from cpstore.run.document import dump_document, load_document
from cpstore.run.model import PackedTokens, ReplayMode, Run, Token
from cpstore.store.facade import open as open_store

_KIND_A, _KIND_B = colliding_kinds()  # two names, one hashed code


def _swallowed(tmp_path: Path, recorded: Any) -> tuple[str, Run, Path]:
    """R: rng 1, then kind A holding ``recorded``; the replay asks for kind B at A's token,
    swallows the refusal (seed 002's retry loop that swallows a warning) and finishes."""
    path = tmp_path / "s"
    with open_store(path) as store:
        rec = store.recorder("agent")
        rec.token("rng", 1)
        rec.token(_KIND_A, recorded)
        cid = rec.checkpoint(1, {"memory": "x"}, seal_ledger=True)
        with store.read(cid) as cp:
            session = ReplaySession(cp)
            assert session.cursor.resolve("rng") == 1
            with pytest.raises(ReplayDivergenceError, match="hashed code"):
                session.cursor.resolve(_KIND_B)
            return cid, session.finish(cp.manifest.state_digest), path


@pytest.mark.parametrize("form", ["run", "json", "msgpack", "cprun"])
def test_a_swallowed_colliding_kind_at_a_none_token_is_no_accept(tmp_path: Path, form: str) -> None:
    cid, replayed, path = _swallowed(tmp_path, None)
    p: Any = replayed if form == "run" else load_document(dump_document(replayed, encoding=form))
    with open_store(path) as store:
        d = validate(cid, p, store=store, record=False)
    assert d.verdict is Verdict.REJECT
    first = d.divergences["tokens"]
    assert (first.code, first.position) == (FindingCode.TOKEN_MISMATCH, 1)
    assert first.expected["value"] is None
    assert first.observed["value"] == {"refused_kind": _KIND_B}


def test_the_kept_refusal_differs_from_the_recorded_record() -> None:
    """The cursor alone: the record it keeps is not R's record at that position."""
    recorded = PackedTokens.from_tokens([Token(0, _KIND_A, None)])
    for mode in ReplayMode:
        cursor = ReplayCursor(recorded, mode=mode)
        with pytest.raises(ReplayDivergenceError):
            cursor.resolve(_KIND_B, live=lambda: None)
        kept = cursor.replayed()
        assert bytes(kept.view()) != bytes(recorded.view())
        assert kept.values == [{"refused_kind": _KIND_B}]
        assert kept.info(0).seq == 0


@pytest.mark.parametrize("recorded", ["x", 0, False, [], {}])
def test_a_refusal_at_any_other_value_keeps_none(tmp_path: Path, recorded: Any) -> None:
    """Where R's value is not None the kept refusal is the placeholder as before (value
    None), which already differs from R's record, and the decision is a REJECT there."""
    cid, replayed, path = _swallowed(tmp_path, recorded)
    assert replayed.tokens.values is not None and replayed.tokens.values[1] is None
    with open_store(path) as store:
        d = validate(cid, replayed, store=store, record=False)
    assert d.verdict is Verdict.REJECT
    assert d.divergences["tokens"].position == 1


def test_a_retry_after_the_refusal_is_still_located_at_it(tmp_path: Path) -> None:
    """The retry loop that asks for the recorded kind after the refusal: a REJECT at the
    refused token (the refusal and the resolved token both stay in P)."""
    path = tmp_path / "s"
    with open_store(path) as store:
        rec = store.recorder("agent")
        rec.token(_KIND_A, None)
        cid = rec.checkpoint(1, {"memory": "x"}, seal_ledger=True)
        with store.read(cid) as cp:
            session = ReplaySession(cp)
            with pytest.raises(ReplayDivergenceError):
                session.cursor.resolve(_KIND_B)
            assert session.cursor.resolve(_KIND_A) is None
            p = session.finish(cp.manifest.state_digest)
        d = validate(cid, p, store=store, record=False)
    assert d.verdict is Verdict.REJECT
    assert {FindingCode.TOKEN_MISMATCH, FindingCode.TOKEN_COUNT} <= d.codes
    assert d.divergences["tokens"].position == 0


@pytest.mark.parametrize("encoding", ["cprun", "json", "msgpack"])
def test_the_command_line_rejects_the_written_replay(tmp_path: Path, encoding: str) -> None:
    """``ReplaySession.write`` of the swallowed refusal, validated by ``cpstore validate``
    against the checkpoint named by its id, in upper case, by a prefix and by RUN@BRANCH."""
    path = tmp_path / "s"
    with open_store(path) as store:
        rec = store.recorder("agent")
        rec.token("rng", 1)
        rec.token(_KIND_A, None)
        cid = rec.checkpoint(1, {"memory": "x"}, seal_ledger=True)
        with store.read(cid) as cp:
            session = ReplaySession(cp)
            session.cursor.resolve("rng")
            with pytest.raises(ReplayDivergenceError):
                session.cursor.resolve(_KIND_B)
            session.write(tmp_path / "p", cp.manifest.state_digest, encoding=encoding)
    for name in (cid, cid.upper(), cid[:10], "agent@main"):
        code, out = cli([name, str(tmp_path / "p"), "--store", str(path)])
        assert code == 10, out
        assert "TOKEN_MISMATCH" in out
