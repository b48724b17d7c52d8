"""audit58: retention on a store at its maximum map size, the way out named and pinned.

A sweep writes too (LMDB copies every page it changes, and it leaves tombstones), so on
a handle whose map reached ``max_map_size`` the gc that would free the space is refused
``StoreFullError`` like any write, nothing removed. The error said only "the store
reached its maximum map size"; it now names the way out (a handle opened with a larger
``max_map_size``; ``cpstore gc`` opens with the default, 1 TiB). Pinned: that gc, run in
another process, frees the space, and the full handle then records again, nothing
acknowledged lost.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import cpstore
from cpstore.errors import StoreFullError

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20


def test_a_gc_at_the_maximum_map_size_names_the_way_out_and_that_way_works(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "s")
    with cpstore.open(path, map_size=MIB, max_map_size=2 * MIB) as store:
        rec = store.recorder("r")
        acked = []
        with pytest.raises(StoreFullError):
            for step in range(10_000):
                acked.append(rec.checkpoint(step, {"blob": os.urandom(20_000)}))
        with pytest.raises(StoreFullError, match="max_map_size") as refused:
            store.gc(keep_last=1)
        assert "cpstore gc" in refused.value.what
        assert store.ref("r") == acked[-1]  # the refused sweep removed nothing
        done = subprocess.run(
            [sys.executable, "-m", "cpstore.cli", "gc", "--keep-last", "1", "--store", path],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"removed {len(acked) - 1} checkpoint(s)"), done.stdout
        rec = store.recorder("r")  # the full handle: the freed pages are reused
        last = rec.checkpoint(len(acked), {"after": "the gc"})
        rec.close()
        with store.read(last) as view:
            assert view.manifest.parent == acked[-1]
        report = store.verify()
        assert report.ok, report.problems
