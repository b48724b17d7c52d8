"""The Python API as a runtime author meets it (issue 14): one behaviour per item."""

from __future__ import annotations

import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

import cpstore
from cpstore import cli
from cpstore.errors import CanonicalEncodingError

ROOT = Path(__file__).resolve().parent.parent


def _record(store: cpstore.Store, run_id: str = "r", *, transcript: bytes | None = None) -> str:
    rec = store.recorder(run_id)
    rec.observe(1, "cfg", b"v1", pinned_at=1.0)
    rec.token("rng", 7)
    rec.token("clock", 1.5)
    rec.token("rng", 8)
    rec.decision(1, "select_tool", tool="search")
    rec.effect("mail", b"hi")
    if transcript is not None:
        rec.transcript(transcript)
    return rec.checkpoint(1, {"a": 1})


def _replay(
    cp: cpstore.CheckpointView,
    *,
    tool: str = "search",
    transcript: str | None = None,
    mode: cpstore.ReplayMode = cpstore.ReplayMode.STRICT,
) -> cpstore.Run:
    session = cpstore.ReplaySession(cp, mode=mode)
    session.observations.read(1, "cfg")
    for kind in ("rng", "clock", "rng"):
        session.cursor.resolve(kind)
    session.decision(1, {"node": "select_tool", "tool": tool})
    session.guard.check("mail", b"hi")
    return session.finish(cpstore.state_digest({"a": 1}), transcript_digest=transcript)


# -- the operator's look and the runtime's outcome ------------------------------------------


def test_operator_validate_does_not_change_the_runtimes_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A runtime's ACCEPT still lets it resume after an operator validates and diffs the same id."""
    path = str(tmp_path / "s")
    with cpstore.open(path) as store:
        cid = _record(store)
        with store.read(cid) as cp:
            replayed = _replay(cp)
        decision = cpstore.validate(cid, replayed, store=store)
        assert decision.verdict is cpstore.Verdict.ACCEPT
    # The operator looks (this validate alone would be a QUARANTINE: a checkpoint as P
    # declares no strict mode).
    assert cli.main(["validate", cid, cid, "--store", path]) == cli.EXIT_QUARANTINE
    assert cli.main(["diff", cid, cid, "--store", path]) == cli.EXIT_OK
    capsys.readouterr()
    with cpstore.open(path) as store:
        permit = cpstore.resume_gate(store, cid, decision)
        rec = store.recorder("r", permit=permit)
        rec.token("rng", 9)
        rec.checkpoint(2, {"a": 2})


def test_an_operator_who_records_sets_the_standing_decision(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --record the operator acts: the runtime's older ACCEPT no longer stands."""
    path = str(tmp_path / "s")
    with cpstore.open(path) as store:
        cid = _record(store)
        with store.read(cid) as cp:
            decision = cpstore.validate(cid, _replay(cp), store=store)
    cli.main(["validate", cid, cid, "--store", path, "--record"])
    capsys.readouterr()
    with cpstore.open(path) as store, pytest.raises(cpstore.GateError, match="supersedes"):
        cpstore.resume_gate(store, cid, decision)


# -- one decision signature -----------------------------------------------------------------


def test_recorder_and_session_take_decisions_with_one_signature(tmp_path: Path) -> None:
    """Name+fields and one mapping make the same entry in both; the replay ACCEPTs either way."""
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("r")
        rec.decision(1, "select_tool", tool="search")
        rec.decision(2, {"node": "answer", "tokens": 3})
        cid = rec.checkpoint(2, {"a": 1})
        with store.read(cid) as cp:
            assert cp.call_graph() == [
                {"node": "select_tool", "tool": "search", "step": 1},
                {"node": "answer", "tokens": 3, "step": 2},
            ]
            session = cpstore.ReplaySession(cp)
            session.decision(1, {"node": "select_tool", "tool": "search"})  # the other form
            session.decision(2, "answer", tokens=3)
            replayed = session.finish(cpstore.state_digest({"a": 1}))
        assert cpstore.validate(cid, replayed, store=store).verdict is cpstore.Verdict.ACCEPT


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((1, 5), {}, "its name"),
        ((1, {"tool": "x"}), {}, "'node' key"),
        ((1, {"node": "x"}), {"tool": "y"}, "not both"),
        ((1, {"node": "x", "step": 2}), {}, "disagrees"),
        ((-1, "x"), {}, "step"),
        ((1, "x"), {"when": object()}, "unsupported type"),
    ],
)
def test_a_malformed_decision_is_refused_at_the_call_by_both(
    tmp_path: Path, args: tuple[object, ...], kwargs: dict[str, object], message: str
) -> None:
    """The session refuses what the recorder refuses, at the call, not later as a mismatch."""
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("r")
        cid = rec.checkpoint(0, {"a": 1})
        with store.read(cid) as cp:
            session = cpstore.ReplaySession(cp)
            for target in (rec, session):
                with pytest.raises(cpstore.InvalidInputError, match=message):
                    target.decision(*args, **kwargs)  # type: ignore[arg-type]


def test_call_graph_mismatch_message_names_the_keys_and_values_that_differ(
    tmp_path: Path,
) -> None:
    """Same node name, different tool: the message says `tool: recorded 'search' vs ...`."""
    with cpstore.open(tmp_path / "s") as store:
        cid = _record(store)
        with store.read(cid) as cp:
            replayed = _replay(cp, tool="browse")
        decision = cpstore.validate(cid, replayed, store=store, record=False)
    finding = next(
        f for f in decision.findings if f.code is cpstore.FindingCode.CALL_GRAPH_MISMATCH
    )
    assert "tool: recorded 'search' vs replayed 'browse'" in finding.message
    assert "select_tool" not in finding.message  # the equal key is not listed


# -- fidelity, BEST_EFFORT, live reads ------------------------------------------------------


def test_call_graph_divergence_without_transcripts_is_not_perturbed(tmp_path: Path) -> None:
    """No transcript on either side: UNVERIFIED; equal transcripts: DIVERGENT_PERTURBED."""
    with cpstore.open(tmp_path / "s") as store:
        bare = _record(store, "bare")
        told = _record(store, "told", transcript=b"answer")
        with store.read(bare) as cp:
            p_bare = _replay(cp, tool="browse")
        with store.read(told) as cp:
            p_told = _replay(cp, tool="browse", transcript=cp.manifest.transcript_digest)
        d_bare = cpstore.validate(bare, p_bare, store=store, record=False)
        d_told = cpstore.validate(told, p_told, store=store, record=False)
    assert d_bare.fidelity is cpstore.Fidelity.UNVERIFIED
    assert d_told.fidelity is cpstore.Fidelity.DIVERGENT_PERTURBED
    assert d_bare.verdict is d_told.verdict is cpstore.Verdict.REJECT


def test_best_effort_resynchronises_by_position(tmp_path: Path) -> None:
    """One inserted live read consumes a recorded position: later tokens of another kind go live."""
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("r")
        kinds = ["rng", "clock"] * 5
        for i, kind in enumerate(kinds):
            rec.token(kind, i)
        cid = rec.checkpoint(1, {"a": 1})
        with store.read(cid) as cp:
            session = cpstore.ReplaySession(cp, mode=cpstore.ReplayMode.BEST_EFFORT)
            assert session.cursor.resolve("env", live=lambda: "inserted") == "inserted"
            got = [session.cursor.resolve(k, live=lambda: "live") for k in kinds[:-1]]
            replayed = session.finish(cpstore.state_digest({"a": 1}))
        decision = cpstore.validate(cid, replayed, store=store, record=False)
    # Position 0 (rng) went to the inserted read; then "rng" meets "clock" at each position.
    assert got == ["live"] * 9
    live = next(f for f in decision.findings if f.code is cpstore.FindingCode.LIVE_RESOLUTION)
    assert live.count == 10


def test_a_replay_session_can_record_a_live_unpinned_observation(tmp_path: Path) -> None:
    """observe_live enters P's observations unpinned; validation reports it."""
    with cpstore.open(tmp_path / "s") as store:
        cid = _record(store)
        with store.read(cid) as cp:
            session = cpstore.ReplaySession(cp)
            session.observations.read(1, "cfg")
            session.observe_live(1, "weather", b"sunny")
            for kind in ("rng", "clock", "rng"):
                session.cursor.resolve(kind)
            session.decision(1, "select_tool", tool="search")
            session.guard.check("mail", b"hi")
            replayed = session.finish(cpstore.state_digest({"a": 1}))
        decision = cpstore.validate(cid, replayed, store=store, record=False)
    assert [o.source for o in replayed.observations] == ["cfg", "weather"]
    assert replayed.observations[1].pinned_at is None
    unpinned = next(
        f for f in decision.findings if f.code is cpstore.FindingCode.UNPINNED_OBSERVATION
    )
    assert unpinned.side == "replayed" and decision.verdict is not cpstore.Verdict.ACCEPT


# -- the quick start, effects across crashes ------------------------------------------------


def test_readme_quick_start_is_safe_to_run_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README quick start run twice in one folder ACCEPTs both times (two runs)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Quick start for a runtime", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None
    monkeypatch.chdir(tmp_path)
    for _ in range(2):
        exec(compile(match.group(1), "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 and all(line.startswith("ACCEPT FAITHFUL") for line in out)
    with cpstore.open(tmp_path / "agent-store") as store:
        assert len(store.runs()) == 2


def test_outbox_example_performs_each_effect_once_across_crashes(tmp_path: Path) -> None:
    """examples/outbox.py killed at random steps and restarted delivers each effect once."""
    rng = random.Random(14)
    store, received = str(tmp_path / "s"), str(tmp_path / "received")
    steps = 12
    crashes = sorted(rng.sample(range(steps), 3))
    script = str(ROOT / "examples" / "outbox.py")
    for crash in [*crashes, None]:
        args = [sys.executable, script, store, received, str(steps)]
        done = subprocess.run([*args] + ([] if crash is None else [str(crash)]), check=False)
        assert done.returncode == (0 if crash is None else 3)
    keys = [line.split("\t", 1)[0] for line in Path(received).read_text().splitlines()]
    assert sorted(keys, key=lambda k: int(k.rsplit(":", 1)[1])) == [
        f"outbox-demo:{i}" for i in range(steps)
    ]


# -- accessors and refusals -----------------------------------------------------------------


def test_latest_id_outside_its_block_raises_and_ref_gives_the_head(tmp_path: Path) -> None:
    """store.latest(run).id before entering is an error, never ''; store.ref is the direct way."""
    with cpstore.open(tmp_path / "s") as store:
        cid = _record(store)
        view = store.latest("r")
        with pytest.raises(cpstore.InvalidInputError, match="not known yet"):
            _ = view.id
        assert store.ref("r") == cid
        with store.latest("r") as cp:
            assert cp.id == cid


def test_steps_going_backwards_are_refused(tmp_path: Path) -> None:
    """A checkpoint at step 3 after step 5 is refused, also for a recorder continuing the branch."""
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("r")
        rec.checkpoint(5, {"a": 1})
        with pytest.raises(cpstore.InvalidInputError, match="backwards"):
            rec.checkpoint(3, {"a": 1})
        rec.checkpoint(5, {"a": 2})  # the same step again is allowed
        again = store.recorder("r")
        with pytest.raises(cpstore.InvalidInputError, match="backwards"):
            again.checkpoint(4, {"a": 1})


def test_validate_with_swapped_sides_is_a_clear_error(tmp_path: Path) -> None:
    """validate(replayed_run, checkpoint_id) says the sides are swapped, not QUARANTINE."""
    with cpstore.open(tmp_path / "s") as store:
        cid = _record(store)
        with store.read(cid) as cp:
            replayed = _replay(cp)
        with pytest.raises(cpstore.InvalidInputError, match="swapped"):
            cpstore.validate(replayed, cid, store=store)


def test_a_state_encoding_error_names_the_part(tmp_path: Path) -> None:
    """An unencodable value deep in part 'x' is reported at state['x']..., not at $."""
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("r")
        with pytest.raises(CanonicalEncodingError) as exc:
            rec.checkpoint(1, {"ok": 1, "x": {"y": [1, {2}]}})
    assert exc.value.where == "state['x']{'y'}[1]"


def test_finish_with_the_state_says_to_pass_its_digest(tmp_path: Path) -> None:
    """finish(dict) tells the caller to pass cpstore.state_digest(state)."""
    with cpstore.open(tmp_path / "s") as store:
        cid = _record(store)
        with store.read(cid) as cp:
            session = cpstore.ReplaySession(cp)
            with pytest.raises(cpstore.InvalidInputError) as exc:
                session.finish({"a": 1})  # type: ignore[arg-type]
    assert "state_digest(state)" in str(exc.value)


def test_str_of_fidelity_prints_like_str_of_verdict() -> None:
    """str(Fidelity.X) is the bare name, as str(Verdict.X) is."""
    assert str(cpstore.Verdict.ACCEPT) == "ACCEPT"
    assert [str(f) for f in cpstore.Fidelity] == [f.name for f in cpstore.Fidelity]
    assert f"{cpstore.Fidelity.DIVERGENT_CAUSAL}" == "DIVERGENT_CAUSAL"
