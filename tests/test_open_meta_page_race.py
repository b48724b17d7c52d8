"""A failed open tells a damaged meta page from a foreign file by the data file LMDB
refused, not by whatever the path names afterwards (audit16).

LMDB refuses a file with one bad meta page as "not an LMDB file", as it refuses a
foreign one; the open then looks for the other meta page's magic. That look used to
go by path: a folder renamed into place between LMDB's refusal and the look made a
store with one damaged meta page report "not an LMDB environment" (exit 9, a store
written off) or a foreign file "damaged" (exit 5). It now reads the data file through
the pinned folder LMDB opened, as the rest of the open path does.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import pytest

import cpstore
from cpstore.errors import CpstoreError, FormatVersionError, IntegrityError

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd")


def _damaged_store(path: Path) -> None:
    """A store whose first meta page lost its magic (the second is sound)."""
    with cpstore.open(path) as st:
        st.recorder("r").checkpoint(0, {"a": 1})
    with open(path / "data.mdb", "r+b") as f:
        f.seek(16)
        f.write(b"\0\0\0\0")


def _foreign(path: Path) -> None:
    """A folder whose data.mdb is not an LMDB file at all."""
    path.mkdir()
    (path / "data.mdb").write_bytes(b"x" * 131072)


@pytest.mark.parametrize(
    ("opened", "swapped_in", "expected"),
    [
        (_damaged_store, _foreign, IntegrityError),
        (_foreign, _damaged_store, FormatVersionError),
    ],
    ids=["damaged-store-opened", "foreign-file-opened"],
)
def test_a_refused_open_judges_the_file_lmdb_refused_when_a_rename_races_it(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    opened: Callable[[Path], None],
    swapped_in: Callable[[Path], None],
    expected: type[CpstoreError],
) -> None:
    """Another folder renamed to the path right after LMDB refused the file does not change
    the verdict: a store with one damaged meta page is "damaged", a foreign file not LMDB."""
    path, other, away = tmp_path / "s", tmp_path / "other", tmp_path / "away"
    opened(path)
    swapped_in(other)
    real = lmdb.open
    swaps: list[str] = []

    def refused_then_renamed(where: str, **kwargs: Any) -> Any:
        try:
            return real(where, **kwargs)
        except lmdb.InvalidError:
            if not swaps:  # the rename races the open: once, after LMDB looked
                os.rename(path, away)
                os.rename(other, path)
                swaps.append(where)
            raise

    monkeypatch.setattr(lmdb, "open", refused_then_renamed)
    with pytest.raises(expected) as caught:
        cpstore.open(path)
    assert swaps, "LMDB refused the file (the hook ran)"
    assert caught.value.where is not None and str(caught.value.where).startswith(str(path))
