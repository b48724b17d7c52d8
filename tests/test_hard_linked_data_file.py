"""A store whose data.mdb has a second hard link (``ln``, ``cp -al``, an rsync
``--link-dest`` snapshot taken of it) (audit17).

The other name is another folder with its own ``lock.mdb``: a writer there and a writer
here do not exclude each other and each reads the meta page its own lock file's txn id
points at. On 25e8a39 another process's writable open through the link acknowledged a
checkpoint that the store's open handle then overwrote (gone on reopen). A writable open
of a data file with another link is refused; a read-only one (a snapshot) still opens.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import cpstore

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux links")

#: In another process: open argv[1] (argv[2] "ro": read-only) and print what happened.
_OTHER = """
import sys, cpstore
try:
    with cpstore.open(sys.argv[1], readonly=sys.argv[2] == "ro") as st:
        if sys.argv[2] == "ro":
            print("read", ",".join(st.runs()))
        else:
            print("wrote", st.recorder("B").checkpoint(0, {"v": "b"}))
except cpstore.errors.StoreError as exc:
    print("refused", exc.what)
"""


def _other(path: Path, mode: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", _OTHER, str(path), mode],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_writable_open_through_a_hard_link_of_an_open_stores_data_file_is_refused(
    tmp_path: Path,
) -> None:
    """a is open here; b/data.mdb is a hard link of a's: another process's writable open
    of b is refused (on 25e8a39 it acknowledged a checkpoint that a's next commit
    overwrote), its read-only open reads; a's own checkpoints all stay."""
    a, b = tmp_path / "a", tmp_path / "b"
    with cpstore.open(a) as first:
        one = first.recorder("A").checkpoint(0, {"v": 0})
        b.mkdir()
        os.link(a / "data.mdb", b / "data.mdb")
        said = _other(b, "rw")
        assert said.startswith("refused") and "hard link" in said, said
        assert _other(b, "ro") == "read A"
        two = first.recorder("A").checkpoint(1, {"v": 1})
        assert first.runs() == ["A"]
    with cpstore.open(a, readonly=True) as again:
        for cid, want in ((one, {"v": 0}), (two, {"v": 1})):
            with again.read(cid) as cp:
                assert cp.state() == want
        assert again.verify().ok


def test_a_writable_open_of_a_store_whose_data_file_has_another_link_is_refused_until_it_goes(
    tmp_path: Path,
) -> None:
    """The link made while nothing is open: a writable open of either name is refused
    (a write through one would change the other's store under another lock file), a
    read-only one opens; once the other link is removed the store opens writable."""
    a, b = tmp_path / "a", tmp_path / "b"
    with cpstore.open(a) as st:
        st.recorder("A").checkpoint(0, {"v": 0})
    b.mkdir()
    os.link(a / "data.mdb", b / "data.mdb")
    for name in (a, b):
        with pytest.raises(cpstore.errors.StoreError) as err:
            cpstore.open(name)
        assert "hard link" in err.value.what
        with cpstore.open(name, readonly=True) as ro:
            assert ro.runs() == ["A"]
    os.unlink(b / "data.mdb")
    with cpstore.open(a) as st:
        st.recorder("A").checkpoint(1, {"v": 1})
        assert st.verify().ok
