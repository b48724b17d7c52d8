"""left86's leftovers in ``lmdb_env``: an interrupt (a signal handler's exception), or a
second one, landing in ``Env``'s undoing of an open and in its close.

left86's sweep of pairs of landings (tests/test_left86_twice_interrupted.py), widened to
``Env.__init__``, ``Env._open_files``, ``Env.close_quiesced`` and ``TailCover.close``: after
each pair the folder's creation lock is free, no descriptor is left, nothing registered,
and the store's close raises nothing but the interrupt. Before:

- ``_open_files`` ran its release once more from its ``except`` when a first interrupt
  landed in it; a second landing at that call's start skipped it, and the creation lock
  stayed this process's for good: every later open of the store, here or in another
  process, waited on it forever (``['release_folders@0', 'release_folders@0:call']``);
- ``Env.__init__``'s undoing closed the held data file and the mark once: a landing at the
  start of the first close leaked both, the mark with its lock
  (``['Env._open_files@894', 'TailCover.close@0:call']``);
- ``close_quiesced`` interrupted after LMDB's close was run again by ``release_env``, whose
  ``durability="none"`` sync then raised "Attempt to operate on closed" out of the close.

Each undoing now runs until done (``Env._let_go``), each interrupt caught."""

from __future__ import annotations

from pathlib import Path

import pytest
import test_left86_twice_interrupted as twice
from test_begin_interrupted import sweep_in_child

FRAMES = {"Env.__init__", "Env._open_files", "Env._let_go", "Env.close_quiesced", "TailCover.close"}


def env_sweep(path: Path, contended: bool) -> list[str]:
    twice._MINE = twice._MINE | FRAMES
    return twice.twice_sweep(path, contended)


@pytest.mark.parametrize("contended", [False, True])
def test_an_envs_undoing_and_close_interrupted_twice_leave_nothing(
    tmp_path: Path, contended: bool
) -> None:
    assert (
        sweep_in_child("test_env_twice_interrupted", "env_sweep", tmp_path / "s", contended) == []
    )
