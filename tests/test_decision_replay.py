"""Enforcement during a replay: the cursor, pinned reads and the ledger guard."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest
from stored import edit_raw

from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import (
    InvalidInputError,
    LedgerGuardError,
    LedgerSealedError,
    RecordingGapError,
    ReplayDivergenceError,
)
from cpstore.native.binding import digest
from cpstore.replay.cursor import ReplayCursor
from cpstore.replay.guards import LedgerGuard, PinnedObservations
from cpstore.replay.session import ReplaySession
from cpstore.run.model import Effect, PackedTokens, ReplayMode, Run, Token
from cpstore.store.facade import open as open_store


def recorded(n: int = 4) -> PackedTokens:
    return PackedTokens.from_tokens(Token(i, ("rng", "clock")[i % 2], i * 10) for i in range(n))


# -- cursor -------------------------------------------------------------------


def test_strict_cursor_returns_recorded_values_in_order() -> None:
    """resolve() hands back each recorded value and advances."""
    c = ReplayCursor(recorded())
    assert [c.resolve(k) for k in ("rng", "clock", "rng", "clock")] == [0, 10, 20, 30]
    assert (c.position, c.remaining, c.mode) == (4, 0, ReplayMode.STRICT)
    c.assert_fully_consumed()


def test_strict_cursor_replayed_buffer_equals_the_recording() -> None:
    """What a strict cursor consumed is byte-identical to the recording."""
    rec = recorded()
    c = ReplayCursor(rec)
    for k in ("rng", "clock", "rng", "clock"):
        c.resolve(k)
    assert bytes(c.replayed().view()) == bytes(rec.view())


def test_kind_mismatch_raises_at_that_seq_with_expected_and_observed() -> None:
    """Asking for a clock where an rng was recorded raises at seq 0."""
    c = ReplayCursor(recorded())
    with pytest.raises(ReplayDivergenceError) as info:
        c.resolve("clock")
    err = info.value
    assert (err.where, err.expected, err.got) == ("seq=0", "rng", "clock")
    assert c.position == 0


def test_strict_cursor_never_calls_the_live_source() -> None:
    """Even with a live fallback given, STRICT raises on a mismatch and never calls it."""
    calls = []
    c = ReplayCursor(recorded())
    with pytest.raises(ReplayDivergenceError, match="STRICT"):
        c.resolve("env", live=lambda: calls.append(1))
    assert calls == []


def test_exhausted_log_raises() -> None:
    """Resolving past the end of the log raises with the seq."""
    c = ReplayCursor(recorded(1))
    c.resolve("rng")
    with pytest.raises(ReplayDivergenceError, match="exhausted") as info:
        c.resolve("rng", live=lambda: 5)
    assert info.value.where == "seq=1"


def test_trailing_tokens_are_caught() -> None:
    """assert_fully_consumed raises when tokens were left unresolved."""
    c = ReplayCursor(recorded(3))
    c.resolve("rng")
    with pytest.raises(ReplayDivergenceError, match="unresolved") as info:
        c.assert_fully_consumed()
    assert info.value.where == "seq=1"


def test_recorded_token_with_live_provenance_is_refused() -> None:
    """A recording whose token was itself live is refused, in any mode."""
    rec = PackedTokens.from_tokens([Token(0, "rng", 1, "live")])
    for mode in ReplayMode:
        with pytest.raises(ReplayDivergenceError, match="refusing to audit"):
            ReplayCursor(rec, mode=mode).resolve("rng", live=lambda: 1)


def test_best_effort_falls_through_and_tags_live_so_validation_quarantines() -> None:
    """BEST_EFFORT may go live; the tokens are tagged live and the decision is QUARANTINE."""
    rec = recorded(2)
    c = ReplayCursor(rec, mode=ReplayMode.BEST_EFFORT)
    assert c.resolve("rng") == 0
    assert c.resolve("env", live=lambda: "live-value") == "live-value"
    out = c.replayed()
    assert out.info(1).provenance == "live" and out.info(1).kind == "env"
    r = Run("r", 1, "s", tokens=rec, ledger_sealed=True, mode=ReplayMode.STRICT)
    p = Run("r", 1, "s", tokens=out, mode=c.mode)
    d = validate(r, p)
    assert {FindingCode.BEST_EFFORT, FindingCode.LIVE_RESOLUTION} <= d.codes
    assert d.verdict is Verdict.REJECT  # the env token also differs from the recorded clock
    assert not d.evidence


def test_best_effort_without_a_live_source_still_raises() -> None:
    """BEST_EFFORT with nothing to fall through to raises."""
    c = ReplayCursor(recorded(0), mode=ReplayMode.BEST_EFFORT)
    with pytest.raises(ReplayDivergenceError, match="no live source"):
        c.resolve("rng")


def test_cursor_needs_values_and_a_mode() -> None:
    """A cursor over digests only, or with a string mode, is refused."""
    with pytest.raises(InvalidInputError):
        ReplayCursor(PackedTokens(recorded().view()))
    with pytest.raises(InvalidInputError):
        ReplayCursor(recorded(), mode="strict")  # type: ignore[arg-type]


# -- pinned observations ------------------------------------------------------


class FakeCheckpoint:
    def __init__(
        self,
        obs: Sequence[tuple[int, str, str, float | None]],
        payloads: dict[tuple[int, str, int], bytes],
    ) -> None:
        self._obs, self._payloads = obs, payloads

    def observations(self) -> Sequence[tuple[int, str, str, float | None]]:
        return self._obs

    def payload(self, step: int, source: str, *, occurrence: int = 0) -> bytes:
        return self._payloads[(step, source, occurrence)]


def test_pinned_reader_serves_payloads_and_records_the_stream() -> None:
    """Each read comes from the recording; repeated reads take the next occurrence."""
    d1, d2 = digest(b"t1").hex(), digest(b"t2").hex()  # each payload's own (audit59)
    src = FakeCheckpoint(
        [(1, "clock", d1, 5.0), (1, "clock", d2, 6.0)],
        {(1, "clock", 0): b"t1", (1, "clock", 1): b"t2"},
    )
    reader = PinnedObservations(src)
    assert reader.read(1, "clock") == b"t1"
    assert reader.read(1, "clock") == b"t2"
    assert [o.payload_digest for o in reader.observations] == [d1, d2]


def test_pinned_reader_raises_a_recording_gap_never_refetches() -> None:
    """An unrecorded (step, source), or one read too often, is a RecordingGapError."""
    d = digest(b"t").hex()
    reader = PinnedObservations(FakeCheckpoint([(1, "clock", d, 5.0)], {(1, "clock", 0): b"t"}))
    with pytest.raises(RecordingGapError) as info:
        reader.read(2, "clock")
    assert info.value.where is not None and "step 2" in info.value.where
    reader.read(1, "clock")
    with pytest.raises(RecordingGapError):
        reader.read(1, "clock")
    assert isinstance(info.value, KeyError)  # RecordingGapError is also a NotFoundError


def test_pinned_reader_on_the_store_refuses_an_unpinned_observation(tmp_path: Path) -> None:
    """The store holds the payload of an unpinned read, but replay must not use it."""
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("r")
        rec.observe(3, "cfg", b"v1", pinned_at=None)
        cid = rec.checkpoint(3, b"state")
        with store.read(cid) as cp, pytest.raises(RecordingGapError, match="not pinned"):
            PinnedObservations(cp).read(3, "cfg")


# -- ledger guard -------------------------------------------------------------


def ledger() -> list[Effect]:
    return [Effect(0, "db", digest(b"a").hex()), Effect(1, "mail", digest(b"b").hex())]


def test_guard_admits_the_ledger_in_order() -> None:
    """Effects equal to the sealed ledger, in order, pass and run their action."""
    g = LedgerGuard(ledger(), sealed=True)
    assert g.perform("db", b"a", lambda: "done") == "done"
    assert g.check("mail", b"b").seq == 1
    assert g.attempted == tuple(ledger())


def test_guard_raises_before_an_unrecorded_effect_escapes() -> None:
    """A different payload at seq 0 raises and the action is never called."""
    escaped = []
    g = LedgerGuard(ledger(), sealed=True)
    with pytest.raises(LedgerGuardError) as info:
        g.perform("db", b"other", lambda: escaped.append(1))
    assert escaped == []
    assert info.value.where == "effect seq=0"
    assert g.attempted[0].payload_digest == digest(b"other").hex()


def test_guard_raises_on_an_effect_beyond_the_ledger() -> None:
    """One effect more than the ledger holds is refused."""
    g = LedgerGuard(ledger()[:1], sealed=True)
    g.check("db", b"a")
    with pytest.raises(LedgerGuardError, match="not in the sealed ledger"):
        g.check("db", b"a")


def test_guard_refuses_writes_and_unsealed_ledgers() -> None:
    """append() always raises LedgerSealedError; an unsealed ledger needs explicit opt-in."""
    with pytest.raises(LedgerSealedError):
        LedgerGuard(ledger(), sealed=True).append("db", b"x")
    with pytest.raises(LedgerGuardError, match="not sealed"):
        LedgerGuard(ledger(), sealed=False)
    assert not LedgerGuard(ledger(), sealed=False, allow_unsealed=True).sealed


def test_a_sealed_ledger_never_changes_and_a_replay_cannot_write_it(tmp_path: Path) -> None:
    """Through the store: the sealed ledger stays as sealed; the guard refuses any write."""
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("r")
        rec.effect("db", b"a")
        sealed = rec.checkpoint(1, b"s")
        rec.effect("db", b"b")  # goes to the next checkpoint's ledger
        rec.checkpoint(2, b"s")
        with store.read(sealed) as cp:
            assert [t for _, t, _ in cp.effects()] == ["db"]
            guard = LedgerGuard.from_checkpoint(cp)
            with pytest.raises(LedgerSealedError):
                guard.append("db", b"b")
            assert [t for _, t, _ in cp.effects()] == ["db"]


# -- a whole session on the store --------------------------------------------


def test_session_on_a_stored_checkpoint_validates_accept(tmp_path: Path) -> None:
    """Cursor, pinned reads and guard over a stored checkpoint give an ACCEPT replay."""
    with open_store(tmp_path / "s") as store:
        rec = store.recorder("r")
        rec.observe(1, "clock", b"\x01", pinned_at=1.0)
        rec.tokens([("rng", 4), ("clock", 1.5), ("my-tool", {"a": [1, 2]})])
        rec.decision(1, {"node": "plan"})
        rec.effect("db", b"row")
        cid = rec.checkpoint(2, {"x": 1})
        with store.read(cid) as cp:
            s = ReplaySession(cp)
            assert s.observations.read(1, "clock") == b"\x01"
            assert [s.cursor.resolve(k) for k in ("rng", "clock", "my-tool")] == [
                4,
                1.5,
                {"a": [1, 2]},
            ]
            s.decision(1, "plan")
            s.guard.check("db", b"row")
            s.cursor.assert_fully_consumed()
            p = s.finish(cp.manifest.state_digest)
        d = validate(cid, p, store=store)
        assert d.verdict is Verdict.ACCEPT, d.findings


def test_stored_cursor_detects_a_damaged_value_even_without_verify_on_read(tmp_path: Path) -> None:
    """A flipped byte in the stored values blob raises IntegrityError, never a wrong value."""

    from cpstore.errors import IntegrityError  # noqa: PLC0415

    path = tmp_path / "s"
    with open_store(path) as store:
        rec = store.recorder("r")
        rec.tokens([("rng", 1000 + i) for i in range(10)])
        cid = rec.checkpoint(1, b"s")
        key = bytes(store.manifest(cid).raw["tokens"]["values"])
    # the last value's low byte: still valid msgpack, a different int
    edit_raw(path, "objects", key, lambda old: old[:-1] + bytes([old[-1] ^ 0x01]))
    with open_store(path) as store, store.read(cid, verify=False) as cp:
        cursor = ReplayCursor.from_checkpoint(cp)
        with pytest.raises(IntegrityError, match="token 9"):
            cursor.resolve("rng")


def test_cursor_refuses_a_kind_whose_code_collides_with_the_recorded_kind() -> None:
    """Asking for k53003 where k9870 (same hashed code) was recorded raises, never matches:
    a kind mismatch (ReplayDivergenceError at that seq; InvalidInputError before audit68,
    which kept no refused request in P: tests/test_audit68_validate_edges.py)."""
    c = ReplayCursor(PackedTokens.from_tokens([Token(0, "k9870", 1)]))
    with pytest.raises(ReplayDivergenceError, match="another name with its hashed code"):
        c.resolve("k53003")


def test_a_session_written_as_a_packed_run_file_validates_in_another_process(
    tmp_path: Path,
) -> None:
    """session.write() emits the replay packed (.cprun); a fresh process validates it ACCEPT."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    with open_store(tmp_path / "s") as store:
        rec = store.recorder("r")
        rec.tokens_from("rng", [1, 2, 3])
        rec.effect("db", b"row")
        cid = rec.checkpoint(2, {"x": 1})
        with store.read(cid) as cp:
            s = ReplaySession(cp)
            assert [s.cursor.resolve("rng") for _ in range(3)] == [1, 2, 3]
            s.guard.check("db", b"row")
            with open(tmp_path / "p.cprun", "wb") as fh:
                s.write(fh, cp.manifest.state_digest)
    child = (
        "import sys, cpstore\n"
        "from cpstore.decision.validate import validate\n"
        "from cpstore.run.document import load_document\n"
        "with cpstore.open(sys.argv[1]) as st:\n"
        "    p = load_document(sys.argv[3])\n"
        "    d = validate(sys.argv[2], p, store=st)\n"
        "    print(type(p.tokens.values).__name__, d.verdict.name)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", child, str(tmp_path / "s"), cid, str(tmp_path / "p.cprun")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == ["EncodedValues", "ACCEPT"]
