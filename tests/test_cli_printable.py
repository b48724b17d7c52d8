"""Text output never hands the terminal what a store holds as control characters.

Run and branch names, provenance tags, metadata keys, state part names and token kind
names are the caller's free text (any UTF-8 but NUL). ``validate`` and ``audit`` escaped
them since audit68; ``inspect``, ``log``, ``retained`` and ``cat`` printed them raw, so a
name holding a newline added a line of its choosing to the listing (a forged head, a
forged "PROBLEM" or verdict), and an escape sequence could erase lines an operator reads.
Now every line is printed escaped (``cli.common.say``), and ``cat``'s tab-separated
columns are escaped one by one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from cpstore.cli import main
from cpstore.cli.exit_codes import EXIT_INTEGRITY
from cpstore.store.facade import open as open_store
from cpstore.store.model import ref_key

FORGED = "x\nPROBLEM refs/r/main: forged\x1b[2K\r\u2028"


@pytest.fixture
def store_at(tmp_path: Path) -> tuple[str, str, str]:
    """A store whose names hold FORGED: its run, a branch, a tag, a metadata key, a part
    name and a token kind; one head retained by a rollback. Returns (path, run, id)."""
    at = str(tmp_path / "s")
    run = "run" + FORGED
    with open_store(at) as store:
        rec = store.recorder(run)
        rec.token("rng" + FORGED, 7)
        first = str(rec.checkpoint(1, {"part" + FORGED: b"v"}, tags=["tag" + FORGED]))
        second = str(rec.checkpoint(2, {"part" + FORGED: b"w"}, metadata={"key" + FORGED: FORGED}))
        store.fork(run, "branch" + FORGED, first)
        store.reset_ref(run, "main", first, expected_old=second, operator="op", reason="test")
    return at, run, second


def _lines(capsys: pytest.CaptureFixture[str], argv: list[str]) -> list[str]:
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    shown = [line.replace("\t", "") for line in lines]  # cat's column separators
    assert all(line.isprintable() for line in shown), [x for x in shown if not x.isprintable()]
    assert "\x1b" not in out and "\r" not in out
    return lines


def test_inspect_escapes_names_tags_keys_and_parts(
    store_at: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    at, _, second = store_at
    lines = _lines(capsys, ["inspect", second, "--store", at])
    assert not any(line.startswith("PROBLEM") for line in lines)
    assert sum("run" in line and "branch main" in line for line in lines) == 1


def test_log_escapes_run_and_branch_names(
    store_at: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    at, run, _ = store_at
    runs = _lines(capsys, ["log", "--store", at])
    assert len(runs) == 1  # one run: one line, its two branches on it
    heads = _lines(capsys, ["log", run, "--store", at])
    assert len(heads) == 1  # main was reset to the first checkpoint


def test_retained_escapes_the_run_and_branch(
    store_at: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    at, _, second = store_at
    lines = _lines(capsys, ["retained", "--store", at])
    assert len(lines) == 2 and lines[0].startswith(second)


def test_cat_tokens_escapes_each_column_and_keeps_its_tabs(
    store_at: tuple[str, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    at, _, second = store_at
    lines = _lines(capsys, ["cat", second, "tokens", "--store", at])
    assert len(lines) == 1
    seq, kind, provenance, value = lines[0].split("\t")
    assert (seq, provenance, value) == ("0", "recorded", "7")
    assert kind.startswith("rng") and "\\n" in kind


@pytest.mark.parametrize("argv", [["verify"], ["audit", "--check"]], ids=["verify", "audit"])
def test_a_problem_line_escapes_the_name_it_places(
    store_at: tuple[str, str, str], capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """A damaged ref is placed at ``refs/RUN/BRANCH``: the PROBLEM line shows the names
    escaped, one line per problem (before, the forged name printed a second PROBLEM)."""
    at, run, _ = store_at
    with open_store(at) as store:
        refs, key = store.backend.dbs["refs"], ref_key(run, "branch" + FORGED)
        with store.backend.read_txn() as txn:
            raw = bytearray(bytes(txn.get(key, db=refs)))
        raw[-1] ^= 1
        store.backend.write_txn(lambda t: t.put(key, bytes(raw), db=refs))
    capsys.readouterr()
    assert main([*argv, "--store", at]) == EXIT_INTEGRITY
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert all(line.isprintable() for line in lines), [x for x in lines if not x.isprintable()]
    problems = [line for line in lines if line.startswith("PROBLEM")]
    assert len(problems) == 1 and "forged" in problems[0], problems
