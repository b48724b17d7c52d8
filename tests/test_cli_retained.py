"""``cpstore retained``: the heads a rollback keeps, listed and released from the command line.

Before it only the API could see or free them, and ``cpstore gc --delete-run`` of a run
left with nothing but retained heads said "no such run" (audit58's report).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cpstore.cli.entry import main
from cpstore.errors import NotFoundError
from cpstore.store.facade import open as open_store


def _reset_store(path: Path) -> list[str]:
    """Run ``r`` with three checkpoints, its main reset to the first: the third retained."""
    with open_store(path) as store:
        rec = store.recorder("r")
        ids = [rec.checkpoint(step, {"a": f"v{step}"}) for step in range(3)]
        rec.close()
        store.reset_ref("r", "main", ids[0], expected_old=ids[2], operator="op", reason="back")
        other = store.recorder("q")
        other.checkpoint(0, {"a": "q"})
        other.close()
    return ids


def _cli(path: Path, *args: str) -> int:
    return main(["retained", "--store", str(path), *args])


def test_list_and_release_a_retained_head(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s"
    ids = _reset_store(path)
    assert _cli(path) == 0
    out = capsys.readouterr().out
    assert f"{ids[2]}  r@main" in out and "1 retained head(s)" in out
    assert _cli(path, "--run", "q") == 0
    assert "0 retained head(s) of run q" in capsys.readouterr().out
    assert _cli(path, "--json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["checkpoint_id"], r["run_id"], r["branch"]) for r in rows] == [(ids[2], "r", "main")]
    # gc keeps the retained head and its lineage until it is released.
    assert main(["gc", "--store", str(path), "--keep-last", "1"]) == 0
    capsys.readouterr()
    with open_store(path, readonly=True) as store:
        assert store.manifest(ids[2]).step == 2
    assert _cli(path, "--release", ids[2][:8], "--operator", "ann", "--reason", "done") == 0
    assert f"released retained head {ids[2]}" in capsys.readouterr().out
    with open_store(path, readonly=True) as store:
        assert store.retained() == {}
        [rec] = store.audit_records(kind="retained_release")
        assert rec.body == {
            "checkpoint": ids[2],
            "holder": next(store.audit_records(kind="ref_reset")).digest,
            "holders_left": [],
            "operator": "ann",
            "reason": "done",
        }
    assert main(["gc", "--store", str(path), "--keep-last", "1"]) == 0
    capsys.readouterr()
    with open_store(path, readonly=True) as store:
        assert ids[2] not in {m.id for m in store.history("r")}
        with pytest.raises(NotFoundError):
            store.manifest(ids[2])


def test_bad_release_input_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s"
    ids = _reset_store(path)
    assert _cli(path, "--release", ids[0], "--operator", "a", "--reason", "b") == 4  # a head
    assert "not a retained head" in capsys.readouterr().err
    assert _cli(path, "--release", ids[2]) == 3  # no operator, reason
    assert _cli(path, "--operator", "a") == 3  # without --release
    assert _cli(path, "--release", ids[2], "--run", "r", "--operator", "a", "--reason", "b") == 3
    assert _cli(path, "--release", "0" * 32, "--operator", "a", "--reason", "b") == 4
    assert _cli(path, "--release", "zz", "--operator", "a", "--reason", "b") == 3
    assert main(["retained", "--store", str(tmp_path / "missing")]) == 4
    capsys.readouterr()
    with open_store(path, readonly=True) as store:
        assert set(store.retained()) == {ids[2]}
        assert list(store.audit_records(kind="retained_release")) == []


def test_gc_of_a_run_with_only_retained_heads_names_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s"
    ids = _reset_store(path)
    with open_store(path) as store:
        store.reset_ref("r", "main", None, expected_old=ids[0], operator="op", reason="gone")
    assert main(["gc", "--store", str(path), "--delete-run", "r"]) == 4
    err = capsys.readouterr().err
    assert "no such run" in err and "2 retained head(s) of it" in err
    assert "cpstore retained" in err
    assert main(["gc", "--store", str(path), "--delete-run", "nope"]) == 4
    assert "retained" not in capsys.readouterr().err  # a typo gets no such hint


def test_two_processes_releasing_one_head_release_it_once(tmp_path: Path) -> None:
    """Concurrent releases from two processes: one succeeds (exit 0), the other finds
    it gone (exit 4); one audit record, the head released."""
    path = tmp_path / "s"
    ids = _reset_store(path)
    cmd = [sys.executable, "-m", "cpstore.cli", "retained", "--store", str(path)]
    args = ["--release", ids[2], "--operator", "ops", "--reason", "race"]
    procs = [
        subprocess.Popen([*cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    codes = sorted(p.wait(timeout=120) for p in procs)
    for p in procs:
        assert p.stdout is not None and p.stderr is not None
        p.stdout.close()
        p.stderr.close()
    assert codes == [0, 4]
    with open_store(path, readonly=True) as store:
        assert store.retained() == {}
        assert len(list(store.audit_records(kind="retained_release"))) == 1
