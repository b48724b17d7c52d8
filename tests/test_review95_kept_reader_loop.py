"""review95: another thread's map growth beside a thread that keeps a slice and reads on.

A thread holding a read may begin another during a map resize (the resize waits for its
first read anyway; making it wait would deadlock). A read kept open by a slice
(slices93) counted as such a read, so a thread that kept one slice and went on reading
began every read while another thread's growth waited, and the growth, which refuses
after 5 s only when nothing but kept views holds reads (``ResizeWait``), always saw one
of those reads running: it waited without end (20 s and on, by hand, beside 500,000
reads), against docs/durability.md's "never waiting without end"; meanwhile no lost
read was ended (``_end_lost`` waits for resizes), and in a stress the reader slots ran
out (``MDB_READERS_FULL``). Now only a read of a block still running lets the thread go
on: one whose only reads are kept waits for the resize like any other thread, and the
growth is refused with ``ReadHeldDuringResizeError`` naming the kept view.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

import cpstore
from cpstore.errors import ReadHeldDuringResizeError
from cpstore.store import kept_views

_BOUND = 30.0  # seconds: the growth's refusal comes after 0.2 s of kept reads alone


def test_a_growth_beside_a_thread_reading_on_with_a_slice_kept_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kept_views, "KEPT_WAIT_SECONDS", 0.2)
    st: Any = cpstore.open(tmp_path / "s", map_size=1 << 20)
    rec = st.recorder("r")
    for i in range(40):
        rec.token("rng", f"value {i}")
    cid = str(rec.checkpoint(0, {"a": 1}))
    rec.close()
    stop, kept_ready = threading.Event(), threading.Event()
    reads = [0]

    def keeper() -> None:
        with st.read(cid) as cp:
            kept = cp.token_value_views()[0][1:]
            inside = bytes(kept)
        kept_ready.set()
        while not stop.is_set():
            with st.read(cid) as cp:
                assert cp.token_count() == 40
            reads[0] += 1
        assert bytes(kept) == inside
        del kept

    outcome: list[BaseException | str] = []

    def writer() -> None:
        try:
            for _ in range(12):
                st.put_object(os.urandom(256 * 1024))  # the map must grow
            outcome.append("grown")
        except BaseException as exc:
            outcome.append(exc)

    reading = threading.Thread(target=keeper)
    reading.start()
    try:
        assert kept_ready.wait(_BOUND)
        growing = threading.Thread(target=writer)
        growing.start()
        growing.join(_BOUND)
        waited = growing.is_alive()
    finally:
        stop.set()
        reading.join()
    growing.join()
    assert not waited, f"the growth still waited after {_BOUND} s beside {reads[0]} reads"
    assert len(outcome) == 1 and isinstance(outcome[0], ReadHeldDuringResizeError), outcome
    assert "zero-copy view" in str(outcome[0])
    assert reads[0] > 0
    for _ in range(12):  # the slice released: the map grows
        st.put_object(os.urandom(256 * 1024))
    st.close()
