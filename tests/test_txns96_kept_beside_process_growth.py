"""txns96: a slice kept in one process while another process grows the map and rewrites.

The keeping process's read stays open (slices93): its reader slot in the shared lock file
pins the snapshot, so the other process's writes never reuse the pages under the slice,
however much it writes and deletes. Once the other process grew the map past this
process's, every txn here must adopt the size, which waits for every read of this
process: beside a kept slice, another thread's read is refused naming the kept view
(``ReadHeldDuringResizeError``) within the kept wait, never waits without end, and once
the slice is released reads adopt the new size and go on.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from script_run import script_output

import cpstore
from cpstore.errors import ReadHeldDuringResizeError
from cpstore.store import kept_views

GROW = r"""
import os, sys
import cpstore
st = cpstore.open(sys.argv[1], durability="none")
st.delete_run("r")  # the slices' checkpoint: its pages freed for reuse but for the pin
for i in range(int(sys.argv[2])):
    rec = st.recorder(f"g{i}")
    rec.checkpoint(0, {"blob": os.urandom(200 * 1024).hex()})
    rec.close()
    if i % 2:
        st.delete_run(f"g{i - 1}")
st.close()
print("grown")
"""

_BOUND = 60.0


def test_a_kept_slice_beside_another_processs_growth_reads_its_own_bytes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process deletes the slices' run and grows the map with 16 MB of puts and
    deletes under slices kept here: they read what they read in their block, another
    thread's read here is refused naming the kept view (not a wait without end), and
    after the release reads go on."""
    monkeypatch.setattr(kept_views, "KEPT_WAIT_SECONDS", 0.2)
    path = tmp_path / "s"
    st: Any = cpstore.open(path, map_size=1 << 20, durability="none")
    rec = st.recorder("r")
    for i in range(16):
        rec.token("rng", f"value {i} " * 30)
    cid = str(rec.checkpoint(0, {"a": 1}))
    rec.close()
    keep = str(st.recorder("keep").checkpoint(0, {"k": 1}))
    env = st._backend.env
    size = env.env.info()["map_size"]
    with st.read(cid) as cp:
        kept = [v[1:] for v in cp.token_value_views()]
        inside = [bytes(v) for v in kept]
    assert script_output(GROW, str(path), "40", timeout=300).strip() == "grown"
    assert [bytes(v) for v in kept] == inside  # pages under the slices never reused

    outcome: list[BaseException | str] = []

    def other() -> None:
        try:
            with st.read(keep) as cp:
                outcome.append(repr(cp.state()))
        except BaseException as exc:
            outcome.append(exc)

    t = threading.Thread(target=other)
    t.start()
    t.join(_BOUND)
    assert not t.is_alive(), f"a read beside the kept slice still waited after {_BOUND} s"
    assert len(outcome) == 1 and isinstance(outcome[0], ReadHeldDuringResizeError), outcome
    assert [bytes(v) for v in kept] == inside
    del kept
    with st.read(keep) as cp:  # adopts the other process's growth
        assert cp.state() == {"k": 1}
    assert env.env.info()["map_size"] > size
    st.close()
    assert env.closed
