"""audit58: an empty store path is bad input, never the current working folder.

``os.stat("")`` is FileNotFoundError, so an empty path was taken for "a new store"
and LMDB made it in the working folder: ``cpstore push "$DEST" --store SRC`` with DEST
unset wrote a whole store into the folder the operator stood in and said "SRC -> :"
exit 0; ``cpstore.open("")`` did the same; ``cpstore copy ""`` said "No such file or
directory: " (exit 4, not found) and ``pull ""`` "no store at this path; at " (exit
4). Each is now refused as bad input (InvalidInputError, exit 3), nothing written.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import cpstore
from cpstore.errors import InvalidInputError
from cpstore.store.maintenance import compact_store, copy_store

ROOT = Path(__file__).resolve().parents[1]


def _source(tmp_path: Path) -> str:
    src = str(tmp_path / "src")
    with cpstore.open(src) as store:
        rec = store.recorder("r")
        rec.checkpoint(0, {"x": 1})
        rec.close()
    return src


def _cli(cwd: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CPSTORE_PATH", None)
    return subprocess.run(
        [sys.executable, "-m", "cpstore.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
        env=env,
    )


@pytest.mark.parametrize(
    "argv",
    [("push", ""), ("pull", ""), ("copy", "")],
    ids=["push", "pull", "copy"],
)
def test_an_empty_path_on_the_command_line_is_bad_input_and_writes_nothing(
    tmp_path: Path, argv: tuple[str, ...]
) -> None:
    src = _source(tmp_path)
    here = tmp_path / "cwd"
    here.mkdir()
    done = _cli(here, *argv, "--store", src)
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    assert "empty" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert os.listdir(here) == []  # no store made in the working folder


@pytest.mark.parametrize("path", ["", b""], ids=["str", "bytes"])
def test_opening_an_empty_path_is_bad_input_and_makes_no_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str | bytes
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidInputError, match="empty"):
        cpstore.open(path)  # type: ignore[arg-type]  # bytes paths are taken too
    assert os.listdir(tmp_path) == []


def test_copying_into_an_empty_path_is_bad_input(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = _source(tmp_path)
    here = tmp_path / "cwd"
    here.mkdir()
    monkeypatch.chdir(here)
    with cpstore.open(src) as store, pytest.raises(InvalidInputError, match="empty"):
        copy_store(store, "")
    assert os.listdir(here) == []


def test_copy_to_an_empty_path_from_inside_a_store_folder_leaves_that_store_whole(
    tmp_path: Path,
) -> None:
    """The worst of it: the failed copy's clean-up removed ``data.mdb`` and ``lock.mdb``
    of DEST joined to "" -- the working folder's. An operator standing in a store's
    folder who ran ``cpstore copy "$BACKUP" --store OTHER`` with BACKUP unset lost that
    store's whole data file."""
    src = _source(tmp_path)
    here = str(tmp_path / "here")
    with cpstore.open(here) as store:
        rec = store.recorder("kept")
        head = rec.checkpoint(0, {"kept": True})
        rec.close()
    done = _cli(Path(here), "copy", "", "--store", src)
    assert sorted(os.listdir(here)) == ["data.mdb", "lock.mdb"]  # [] before the fix
    assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
    with cpstore.open(here, readonly=True) as store:
        assert store.ref("kept") == head
        report = store.verify()
        assert report.ok, report.problems


@pytest.mark.parametrize("bad", [None, 5, 1.5], ids=["None", "int", "float"])
def test_a_copy_or_compact_path_of_another_type_is_bad_input(tmp_path: Path, bad: object) -> None:
    """``copy_store(store, None)`` and ``compact_store(5)`` raised a bare TypeError (every
    error of the store is a CpstoreError: one root exception)."""
    src = _source(tmp_path)
    with cpstore.open(src) as store, pytest.raises(InvalidInputError, match="path"):
        copy_store(store, bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="path"):
        compact_store(bad)  # type: ignore[arg-type]
    with cpstore.open(src, readonly=True) as store:
        assert store.verify().ok
