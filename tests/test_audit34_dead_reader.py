"""audit34: a reader process killed while it holds a read does not fill a writer's map.

LMDB keeps every page a live read may see, and knows a reader by its slot in
``lock.mdb``. A process SIGKILLed inside ``store.read()`` leaves its slot behind; LMDB
frees such slots only when asked (``reader_check``), which cpstore did at open and when
the slots ran out. So a writer that kept the store open never reused a page freed after
the dead reader's snapshot: it grew the map (the file) without bound, and at
``max_map_size`` it was refused ``StoreFullError`` with most of the file free. A full
map now first frees the slots of dead readers, then grows only if that freed nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from cpstore.errors import StoreFullError
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store

MAP = 2 << 20  # holds the live data many times over, never what 100 pruned steps wrote

_READER = """
import sys, time
import cpstore
st = cpstore.open(sys.argv[1])
view = st.read(st.ref("r"))
view.__enter__()  # a read held, as inside a with block, when the SIGKILL comes
print("holding", flush=True)
time.sleep(600)
"""


def _kill_a_reader_mid_read(path: Path) -> None:
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER, str(path)], stdout=subprocess.PIPE, text=True
    )
    assert reader.stdout is not None
    try:
        assert reader.stdout.readline().strip() == "holding"
    finally:
        reader.send_signal(signal.SIGKILL)
        reader.wait(60)
    assert reader.returncode == -signal.SIGKILL


def _prune_as_you_go(st: Store, first: int, steps: int) -> list[str]:
    """Steps ``first`` .. ``steps`` of 60 KB states on run r, pruned to the last one every
    5 steps; returns their ids."""
    stored = []
    for step in range(first, steps + 1):
        stored.append(st.recorder("r").checkpoint(step, {"a": os.urandom(30_000).hex()}))
        if step % 5 == 0:
            st.prune(keep_last=1, run_id="r")
    return stored


def test_a_writer_reuses_the_pages_a_reader_killed_mid_read_pinned(tmp_path: Path) -> None:
    """100 steps of 60 KB states, pruned to the last one every 5 steps, in a map of 2 MiB
    beside a reader SIGKILLed holding a read: every step stored, no StoreFullError."""
    path = tmp_path / "s"
    stored: list[str] = []
    with open_store(path, map_size=MAP, max_map_size=MAP) as st:
        stored.append(st.recorder("r").checkpoint(0, {"a": "first"}))
        _kill_a_reader_mid_read(path)
        try:
            stored += _prune_as_you_go(st, 1, 100)
        except StoreFullError as exc:  # the map was full of pages nothing could see
            space = st.space()
            raise AssertionError(
                f"refused with head {st.ref('r')}: {exc}; "
                f"{space.used_bytes} bytes used, "
                f"{space.reusable_bytes} reusable"
            ) from exc
        assert st.ref("r") == stored[-1]
        with st.read(stored[-1]) as cp:
            state = cp.state()
            assert isinstance(state, dict) and len(state["a"]) == 60_000
        report = st.verify()
        assert report.ok, report.problems


def test_a_growing_map_stays_small_beside_a_reader_killed_mid_read(tmp_path: Path) -> None:
    """The same steps in a 1 MiB map allowed to grow: the file stays within 2 MiB (it grew
    with every step before, the dead reader's slot pinning each page freed since)."""
    path = tmp_path / "s"
    with open_store(path, map_size=MAP // 2) as st:
        st.recorder("r").checkpoint(0, {"a": "first"})
        _kill_a_reader_mid_read(path)
        _prune_as_you_go(st, 1, 100)
        space = st.space()
        assert space.file_bytes <= MAP, space
        report = st.verify()
        assert report.ok, report.problems


def test_a_writer_beside_a_reader_killed_mid_read_keeps_its_file_far_below_the_map(
    tmp_path: Path,
) -> None:
    """audit36: 400 steps of 60 KB states, pruned to the last one every 5 steps, in a
    16 MiB map beside a reader SIGKILLed holding a read: the data file stays within a
    quarter of the map. Dead readers' slots were freed only when the map was full, so
    the file first grew to the whole map (16 MiB for ~300 KB of live data); they are now
    freed also when the file grows (Env._cover_tail, once per 1 MiB step)."""
    path = tmp_path / "s"
    big = 16 << 20
    with open_store(path, map_size=big, max_map_size=big) as st:
        st.recorder("r").checkpoint(0, {"a": "first"})
        _kill_a_reader_mid_read(path)
        _prune_as_you_go(st, 1, 400)
        space = st.space()
        assert space.file_bytes <= big // 4, space
        assert os.path.getsize(path / "data.mdb") <= big // 4
        report = st.verify()
        assert report.ok, report.problems
