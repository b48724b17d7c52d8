"""cli99: ``validate`` of a checkpoint id the store does not hold is not found (exit 4).

A well-formed id naming nothing (a typo, another store's checkpoint, a pruned one) was
judged: REJECT with one INTEGRITY finding ("no such checkpoint"), exit 10, and with
``record`` (the library's default, the CLI's ``--record``) appended to the audit log as
the checkpoint's decision. A REJECT claims a proven divergence; nothing was compared.
A prefix of the same id that resolves nothing was already exit 4 (README, "Naming
checkpoints"). Now :class:`NotFoundError`, nothing recorded; a stored checkpoint that
cannot be read (damage) is still judged: REJECT with INTEGRITY, exit 10.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_decision_support import clean_doc, replay_of, unreadable_checkpoint

from cpstore import cli
from cpstore.decision.table import FindingCode, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import NotFoundError
from cpstore.store.facade import open as open_store

MISSING = "0123456789abcdef0123456789abcdef"


def _store(tmp_path: Path) -> tuple[str, str]:
    """(store folder, a stored checkpoint's id): run "run", one checkpoint."""
    path = str(tmp_path / "s")
    with open_store(path) as store:
        rec = store.recorder("run")
        cid = rec.checkpoint(1, {"a": 1})
    return path, cid


@pytest.mark.parametrize("record", [True, False])
@pytest.mark.parametrize("side", ["recorded", "replayed"])
def test_the_library_raises_not_found_and_records_nothing(
    tmp_path: Path, side: str, record: bool
) -> None:
    path, cid = _store(tmp_path)
    with open_store(path) as store:
        before = len(list(store.audit_records()))
        sides = (MISSING, cid) if side == "recorded" else (cid, MISSING)
        with pytest.raises(NotFoundError) as told:  # was a REJECT decision (INTEGRITY)
            validate(*sides, store=store, record=record)
        assert len(list(store.audit_records())) == before
    assert told.value.got == MISSING and f"{side} checkpoint" in told.value.what


def test_a_pruned_checkpoint_is_not_found_and_says_pruned(tmp_path: Path) -> None:
    path, old = _store(tmp_path)
    with open_store(path) as store:
        rec = store.recorder("run")
        rec.checkpoint(2, {"a": 2})
        store.prune(keep_last=1)
        with pytest.raises(NotFoundError, match="pruned"):
            validate(old, replay_of(clean_doc()), store=store)


@pytest.mark.parametrize("record", [[], ["--record"]])
@pytest.mark.parametrize("side", ["recorded", "replayed"])
def test_the_command_exits_4(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], side: str, record: list[str]
) -> None:
    path, _ = _store(tmp_path)
    sides = [MISSING, "run@main"] if side == "recorded" else ["run@main", MISSING]
    code = cli.main(["validate", *sides, "--store", path, *record])
    out, err = capsys.readouterr()
    assert code == 4, (out, err)  # was 10, "verdict REJECT"
    assert out == "" and "REJECT" not in err
    assert err.startswith(f"cpstore validate: {side} checkpoint is not in the store"), err
    with open_store(path, readonly=True) as store:
        assert not list(store.audit_records(kind="decision"))


def test_a_stored_checkpoint_that_cannot_be_read_is_still_judged(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "s")
    gone = unreadable_checkpoint(path)
    with open_store(path) as store:
        d = validate(gone, replay_of(clean_doc()), store=store, record=False)
    assert d.verdict is Verdict.REJECT
    assert FindingCode.INTEGRITY in {f.code for f in d.findings}
    assert cli.main(["validate", gone, gone, "--store", path]) == 10
    assert "INTEGRITY" in capsys.readouterr().out
