"""review74: ident72's CHECKPOINT_MISMATCH, adversarially (LMDB and PostgreSQL).

A replay's ``replay:<id>`` tag spelled otherwise than ``ReplaySession`` writes it
(another case, whitespace around it or around the id: a replay engine that writes its
own documents, an id read from a file with its newline) still names that checkpoint,
as ``Store.resolve`` reads a typed id padded or in upper case. Before review74 such a
tag was read as free-form, so a replay of A validated against B was an ACCEPT and,
recorded, B's standing decision. R's own tags still exempt a replay only when they
start with ``replay:`` exactly (those that make R a REPLAY_OF_REPLAY, a REJECT): a
recording tagged ``Replay:<A>`` is no replay by seed 004's rule, and must not let a
replay of A pass as evidence about it.

Also pinned: a replay reaches the check whichever way it is handed over (a ``.cprun``,
JSON or msgpack file on the command line, with and without ``--record``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from pg_cluster import backend_store, backend_url  # noqa: F401 - fixtures
from test_cli import run
from test_ident72_replayed_checkpoint import STATE, _record, _replay

import cpstore
from cpstore import cli
from cpstore.decision.table import FindingCode, Verdict
from cpstore.errors import GateError, InvalidInputError

SPELLINGS = [
    "Replay:{}",
    "REPLAY:{}",
    " replay:{}",
    "replay: {}",
    "replay:{} ",
    "replay:{}\n",
    "\treplay:\t{}\r\n",
]


@pytest.mark.parametrize("spelling", SPELLINGS)
def test_a_replay_tag_spelled_otherwise_still_names_its_checkpoint(
    store: cpstore.Store, spelling: str
) -> None:
    a, b = _record(store, "main"), _record(store, "alt")
    tag = spelling.format(a)
    replayed = dataclasses.replace(_replay(store, a), provenance_tags=(tag,))
    wrong = cpstore.validate(b, replayed, store=store, record=False)
    assert wrong.verdict is Verdict.QUARANTINE
    (f,) = wrong.findings
    assert (f.code, f.position, f.expected, f.observed) == (
        FindingCode.CHECKPOINT_MISMATCH,
        0,
        f"replay:{b}",
        tag,
    )
    assert a in f.message
    # The checkpoint it names, spelled in upper case too, is the one replayed: no finding.
    for named in (a, a.upper()):
        right = dataclasses.replace(replayed, provenance_tags=(spelling.format(named),))
        assert cpstore.validate(a, right, store=store, record=False).verdict is Verdict.ACCEPT


class _Liar(str):
    """A runtime's own tag type whose text methods say it names nothing."""

    __hash__ = str.__hash__

    def startswith(self, *args: object, **kwargs: object) -> bool:
        return False

    def strip(self, chars: str | None = None) -> str:
        return "free-form"

    def lower(self) -> str:
        return "free-form"


def test_a_tag_of_a_str_subclass_is_read_as_its_text(store: cpstore.Store) -> None:
    """P's tags are read as the plain text they hold (audit68's rule for a Run), so a
    subclass's ``startswith``, ``strip`` or ``lower`` decides nothing."""
    a, b = _record(store, "main"), _record(store, "alt")
    replayed = dataclasses.replace(_replay(store, a), provenance_tags=(_Liar(f"Replay:{a}"),))
    assert cpstore.validate(b, replayed, store=store, record=False).codes == {
        FindingCode.CHECKPOINT_MISMATCH
    }


def test_r_tagged_otherwise_exempts_no_replay(store: cpstore.Store) -> None:
    """R tagged ``Replay:<a>`` is no recording of a replay (no REPLAY_OF_REPLAY, seed 004's
    ``startswith("replay:")``), so it is no exemption either: a replay of A against it
    stays a CHECKPOINT_MISMATCH, never an ACCEPT."""
    a = _record(store, "main")
    b = _record(store, "alt", tags=(f"Replay:{a}",))
    d = cpstore.validate(b, _replay(store, a), store=store, record=False)
    assert d.codes == {FindingCode.CHECKPOINT_MISMATCH}


@pytest.mark.parametrize("encoding", ["cprun", "json", "msgpack"])
def test_a_replay_file_on_the_command_line_is_compared(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], encoding: str
) -> None:
    """``cpstore validate B replay-of-A.FILE``: QUARANTINE (exit 11), looking only; with
    ``--record`` it is B's standing decision and a recorder from B needs a permit."""
    with cpstore.open(url) as store:
        a, b = _record(store, "main"), _record(store, "alt")
        path = tmp_path / f"p.{encoding}"
        with store.read(a) as cp, open(path, "wb") as fh:
            session = cpstore.ReplaySession(cp)
            session.decision(1, "run_tool", args=["ls"])
            session.cursor.resolve("rng")
            session.write(fh, cpstore.state_digest(STATE), encoding=encoding)
    for name in (b, "r@alt", b[:10].upper()):
        code, out, _ = run(["validate", name, str(path), "--store", url], capsys)
        assert code == cli.EXIT_QUARANTINE and "CHECKPOINT_MISMATCH" in out
    code, _, _ = run(["validate", "r@main", str(path), "--store", url], capsys)
    assert code == cli.EXIT_OK
    with cpstore.open(url) as store:
        store.recorder("r", branch="alt").close()  # nothing recorded yet: not gated
    code, _, _ = run(["validate", b, str(path), "--store", url, "--record"], capsys)
    assert code == cli.EXIT_QUARANTINE
    with cpstore.open(url) as store, pytest.raises(GateError):
        store.recorder("r", branch="alt")


def test_an_open_checkpoint_view_is_no_side(store: cpstore.Store) -> None:
    """A ``CheckpointView`` handed over as R or P is bad input (its id is what names the
    checkpoint), never read as a run without its id, which would skip the check."""
    a, b = _record(store, "main"), _record(store, "alt")
    replayed = _replay(store, a)
    with store.read(b) as cp:
        with pytest.raises(InvalidInputError, match="checkpoint id"):
            cpstore.validate(cp, replayed, store=store)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="checkpoint id"):
            cpstore.validate(a, cp, store=store)  # type: ignore[arg-type]
    assert not [r for r in store.audit_records() if r.kind == "decision"]  # nothing recorded


def test_a_recorded_mix_up_quarantines_rs_branch_for_rollback_for_good(
    store: cpstore.Store,
) -> None:
    """As every QUARANTINE recorded about a checkpoint: a later ACCEPT of a replay of B
    itself supersedes it for a resume, not for ``certify_rollback`` (a quarantined branch
    is never rolled back). Pinned as documented; A's branch is untouched."""
    a, b = _record(store, "main"), _record(store, "alt")
    cpstore.validate(b, _replay(store, a), store=store)
    right = cpstore.validate(b, _replay(store, b), store=store)
    assert right.verdict is Verdict.ACCEPT
    store.recorder("r", branch="alt").close()  # the resume is released
    with pytest.raises(GateError, match="quarantined"):
        cpstore.certify_rollback(store, b, right)
    on_a = cpstore.validate(a, _replay(store, a), store=store)
    assert cpstore.certify_rollback(store, a, on_a).branch == "main"


def test_the_gates_take_an_id_in_either_case_as_validate_does(store: cpstore.Store) -> None:
    """``validate`` reads 32 hex characters in either case as the one checkpoint (audit68)
    and records its decision about the lowercase id; before review74 ``resume_gate`` and
    ``certify_rollback`` named so refused it as "a decision about another checkpoint"."""
    a, b = _record(store, "main"), _record(store, "alt")
    wrong = cpstore.validate(b.upper(), _replay(store, a), store=store)
    assert wrong.recorded.checkpoint_id == b
    so = cpstore.sign_off(store, wrong, operator="op", reason="A and B share their pre-state")
    permit = cpstore.resume_gate(store, b.upper(), wrong, sign_off=so)
    assert permit.checkpoint_id == b
    store.recorder("r", branch="alt", permit=permit).close()
    right = cpstore.validate(a.upper(), _replay(store, a), store=store)
    assert cpstore.certify_rollback(store, a.upper(), right).checkpoint_id == a
    with pytest.raises(GateError, match="another checkpoint"):
        cpstore.certify_rollback(store, b.upper(), right)  # still about A, not B
