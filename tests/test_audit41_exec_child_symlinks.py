"""audit41 guard: a program exec'd while a store is open inherits none of LMDB's
descriptors when the store's path is a symlink and its data.mdb one to another folder.

freshopen (7cc6e57) takes the data file's identity for close_on_exec from the held
descriptor's fstat instead of a stat of the pinned folder's data.mdb: both follow the
links to the same file, so LMDB's data file descriptors (found by that identity in
/proc/self/fd) are still made close-on-exec. Passes as merged (checked, not a fix).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import cpstore

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd")

_LIST_FDS = (
    "import os; print('\\n'.join(os.readlink('/proc/self/fd/' + f)"
    " for f in os.listdir('/proc/self/fd') if f.isdigit()"
    " and os.path.exists('/proc/self/fd/' + f)))"
)


def _open_targets(under: str) -> list[str]:
    fds = [f for f in os.listdir("/proc/self/fd") if f.isdigit()]
    names = [os.readlink(f"/proc/self/fd/{f}") for f in fds if os.path.exists(f"/proc/self/fd/{f}")]
    return [t for t in names if t.startswith(under)]


@pytest.mark.parametrize("readonly", [False, True])
def test_no_descriptor_of_a_symlinked_store_reaches_an_exec_child(
    tmp_path: Path, readonly: bool
) -> None:
    real, other, link = tmp_path / "real", tmp_path / "other", tmp_path / "link"
    other.mkdir()
    link.symlink_to(real, target_is_directory=True)
    with cpstore.open(str(link)) as st:
        st.recorder("w").checkpoint(0, {"i": 0})
    (real / "data.mdb").rename(other / "data.mdb")
    (real / "data.mdb").symlink_to(other / "data.mdb")
    with cpstore.open(str(link), readonly=readonly) as st:
        if not readonly:
            st.recorder("w").checkpoint(1, {"i": 1})
        held = _open_targets(str(tmp_path))
        listing = subprocess.run(
            [sys.executable, "-c", _LIST_FDS],
            capture_output=True,
            text=True,
            close_fds=False,
            timeout=60,
            check=True,
        ).stdout.splitlines()
    assert str(other / "data.mdb") in held, held  # LMDB's (and ours) are open here
    assert listing, listing
    assert [t for t in listing if t.startswith(str(tmp_path))] == []
