"""`copy`: a child that dies after it has written into DEST leaves no copy behind.

The copy runs in a forked child (cpstore/cli/child.py) so a page that kills liblmdb is
exit 5 in one line. A copy that fails its verify is removed (docs/store.md) -- but only
when the verify raises; a child killed while writing the copy, or while verifying it
(liblmdb dies on a damaged page of the copy as it would on the store's), left DEST
holding a whole or half-written data file beside the "damaged" error, which a later
open takes for a store. Here the child dies right after the copy is written, and in
the copy's verify."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_cli_child_ops import _cli, _store

from cpstore import cli

_DIE = {
    "written": (
        "import cpstore.store.lmdb_copy as c\n"
        "real = c.copy_env\n"
        "def die(env, dest, *, compact):\n"
        "    real(env, dest, compact=compact)\n"
        "    os.abort()\n"
        "c.copy_env = die\n"
        "import cpstore.store.lmdb_backend as b\n"
        "b.copy_env = die\n"
    ),
    "verifying": (
        "import cpstore.store.maintenance as m\nm._verified = lambda *a, **k: os.abort()\n"
    ),
}


@pytest.mark.parametrize("when", sorted(_DIE))
@pytest.mark.parametrize("dest_exists", [False, True])
def test_a_copy_whose_child_died_leaves_no_copy(
    tmp_path: Path, when: str, dest_exists: bool
) -> None:
    path, dest = tmp_path / "s", tmp_path / "copy"
    _store(path)
    if dest_exists:
        dest.mkdir()  # a new or empty folder: stays, emptied
    script = (
        "import os, sys\nfrom cpstore import cli\n"
        + _DIE[when]
        + "sys.exit(cli.main(sys.argv[1:]))\n"
    )
    proc = _cli("copy", str(dest), "--store", str(path), script=script)
    assert proc.returncode == cli.EXIT_INTEGRITY, (proc.returncode, proc.stderr)
    assert "liblmdb died with SIGABRT copying it" in proc.stderr, proc.stderr
    assert dest.exists() == dest_exists
    assert not dest.exists() or os.listdir(dest) == [], os.listdir(dest)


def test_a_copy_refused_for_a_folder_not_empty_leaves_it_as_it_was(tmp_path: Path) -> None:
    path, dest = tmp_path / "s", tmp_path / "copy"
    _store(path)
    dest.mkdir()
    (dest / "mine").write_text("keep")
    assert cli.main(["copy", str(dest), "--store", str(path)]) == cli.EXIT_BAD_INPUT
    assert os.listdir(dest) == ["mine"]
