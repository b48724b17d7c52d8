"""left86's leftover: a second interrupt (a signal handler's exception) landing in
``Env._open_files``' release of the creation lock and the pinned folder.

The release ran ``release_folders`` once more from its ``except`` when a first interrupt
landed in it: a second landing at that call's start skipped it, and the folder's creation
lock stayed this process's for good; every later open of the store, here or in another
process, waited on it forever. left86's sweep of pairs of landings
(tests/test_left86_twice_interrupted.py), widened to ``Env._open_files``, finds the
creation lock free after each pair; it now releases until its list is empty, catching
each interrupt and raising the last after."""

from __future__ import annotations

from pathlib import Path

import pytest
import test_left86_twice_interrupted as twice
from test_begin_interrupted import sweep_in_child


def open_files_sweep(path: Path, contended: bool) -> list[str]:
    twice._MINE = twice._MINE | {"Env._open_files"}
    return twice.twice_sweep(path, contended)


@pytest.mark.parametrize("contended", [False, True])
def test_a_second_interrupt_in_open_files_release_leaves_the_folder_unlocked(
    tmp_path: Path, contended: bool
) -> None:
    got = sweep_in_child(
        "test_open_files_twice_interrupted", "open_files_sweep", tmp_path / "s", contended
    )
    assert got == []
