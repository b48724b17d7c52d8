"""Options that did nothing where they were given, left from audit60's report.

``cat CID tokens --occurrence 3`` ignored ``--occurrence`` (and ``--start``/``--count``
with a payload were ignored the same way); ``cpstore validate`` had no ``--max-bytes``
though its too-large error named ``max_bytes=``; ``convert IN OUT --force`` renamed over
a FIFO or a device node, and ``convert IN /dev/stdout`` said only "exists".
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_decision_support import clean_doc, replay_of

import cpstore
from cpstore import cli


def _store(path: Path) -> None:
    with cpstore.open(path) as store:
        rec = store.recorder("r")
        rec.token("rng", 1)
        rec.token("rng", 2)
        rec.observe(1, "cfg", b"one", pinned_at=1.0)
        rec.observe(1, "cfg", b"two", pinned_at=1.0)
        rec.effect("t", b"e")
        rec.checkpoint(1, {"a": 1})


@pytest.mark.parametrize(
    ("what", "option"),
    [
        (["tokens"], ["--occurrence", "1"]),
        (["effect", "0"], ["--occurrence", "0"]),
        (["observation", "1", "cfg"], ["--start", "1"]),
        (["transcript"], ["--count", "1"]),
    ],
)
def test_cat_refuses_an_option_that_does_not_go_with_what(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], what: list[str], option: list[str]
) -> None:
    path = tmp_path / "s"
    _store(path)
    code = cli.main(["cat", "r@main", *what, *option, "--store", str(path)])
    out, err = capsys.readouterr()
    assert code == cli.EXIT_BAD_INPUT and out == "", (code, out, err)
    assert option[0] in err and "does not go with" in err


def test_cat_options_that_go_with_what_still_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "s"
    _store(path)
    base = ["--store", str(path), "--json"]
    assert cli.main(["cat", "r@main", "observation", "1", "cfg", "--occurrence", "1", *base]) == 0
    assert json.loads(capsys.readouterr().out) == {"bytes_hex": b"two".hex()}
    assert cli.main(["cat", "r@main", "observation", "1", "cfg", *base]) == 0
    assert json.loads(capsys.readouterr().out) == {"bytes_hex": b"one".hex()}
    assert cli.main(["cat", "r@main", "tokens", "--start", "1", "--count", "1", *base]) == 0
    assert [t["value"] for t in json.loads(capsys.readouterr().out)] == [2]


def test_validate_takes_max_bytes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    r = tmp_path / "r.json"
    p = tmp_path / "p.json"
    doc = clean_doc()
    r.write_text(json.dumps(doc))
    p.write_text(json.dumps(replay_of(doc)))
    assert cli.main(["validate", str(r), str(p), "--max-bytes", "100"]) == cli.EXIT_BAD_INPUT
    assert "--max-bytes" in capsys.readouterr().err
    assert cli.main(["validate", str(r), str(p), "--max-bytes", str(1 << 20)]) == 0
    capsys.readouterr()


def test_convert_never_renames_over_a_fifo_or_device(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "r.json"
    src.write_text(json.dumps(clean_doc()))
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    assert cli.main(["convert", str(src), str(fifo), "--force"]) == cli.EXIT_BAD_INPUT
    assert "not a regular file" in capsys.readouterr().err
    assert fifo.is_fifo()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["out.json", "r.json"]  # no temp
    # A link to a pipe, as /dev/stdout is (never /dev itself here: a regression as root
    # would rename over a device node).
    link = tmp_path / "stdout.json"
    link.symlink_to(fifo)
    assert cli.main(["convert", str(src), str(link), "--force"]) == cli.EXIT_BAD_INPUT
    assert "not a regular file" in capsys.readouterr().err
    assert link.is_symlink() and fifo.is_fifo()


def test_a_part_of_a_bytes_state_says_the_state_is_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``inspect --part x`` of a bytes state said "no such state part ... expected []"."""
    path = tmp_path / "s"
    with cpstore.open(path) as store:
        cid = store.recorder("b").checkpoint(1, b"raw state")
        with store.read(cid) as cp, pytest.raises(cpstore.NotFoundError) as info:
            cp.state_part("x")
    assert "the state is bytes" in info.value.what and info.value.expected == "a parts state"
    assert cli.main(["inspect", "b@main", "--part", "x", "--store", str(path)]) == 4
    assert "the state is bytes" in capsys.readouterr().err
