"""copy_store of a store whose map another process grew past this process's.

LMDB's copy begins a read txn of its own, which LMDB refuses with MDB_MAP_RESIZED until
this process takes up the new size; nothing did, so every copy_store of the store was
refused ("LMDB could not copy the store") until some read of this process happened to
adopt it, and each refusal left an empty data.mdb in the destination (audit50). The copy
now takes up the size and is made again: complete and verified.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import cpstore
from cpstore.store import copy_store

_GROW = r"""
import os, sys, cpstore
st = cpstore.open(sys.argv[1], map_size=1 << 20)
rec = st.recorder("other")
for i in range(12):  # ~6 MB: the map grows well past the first process's 1 MiB
    rec.checkpoint(i, {"blob": os.urandom(1 << 18).hex()})
st.close()
"""


@pytest.mark.parametrize("readonly", [False, True])
def test_copy_after_another_process_grew_the_map(tmp_path: Path, readonly: bool) -> None:
    path = str(tmp_path / "s")
    st = cpstore.open(path, map_size=1 << 20)
    st.recorder("r").checkpoint(0, {"a": 1})
    if readonly:
        st.close()
        st = cpstore.open(path, readonly=True)
    try:
        subprocess.run([sys.executable, "-c", _GROW, path], check=True, timeout=120)
        for name in ("c1", "c2"):  # before: both refused, MDB_MAP_RESIZED
            report = copy_store(st, str(tmp_path / name))
            assert report.ok, report
            with cpstore.open(str(tmp_path / name), readonly=True) as copy:
                assert copy.latest("other") is not None
                assert copy.latest("r") is not None
    finally:
        st.close()
