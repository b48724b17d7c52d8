"""review94: a read begun inside ``EnvTxns._end_lost`` (a signal handler's) took a live entry.

``_end_lost`` aborts each lost read's txn, then removes the calling thread's item and one
of its reader entries (review90's counts). A read begun where the abort returns (a signal
handler landing there reads the store; a finalizer's flush writes) ran ``_end_lost`` again
and ended the same item; back in the outer loop ``lost.remove`` raised ValueError and its
``finally`` removed another entry of the thread: the entry of a read it still held. That
read was no longer counted: its thread's next read failed with the raw ValueError, and a
close or a map resize of another thread no longer waited for it (LMDB's close or
set_mapsize under an open txn: the process may crash). An item ended meanwhile is now
passed over.
"""

from __future__ import annotations

import sys
from collections.abc import Generator
from pathlib import Path
from typing import Any

import cpstore
from cpstore.store.lmdb_backend import LmdbBackend


def test_a_read_begun_where_a_lost_abort_returns_leaves_the_live_read_counted(
    tmp_path: Path,
) -> None:
    st = cpstore.open(tmp_path / "s")
    backend = st._backend
    assert isinstance(backend, LmdbBackend)
    env = backend.env
    cid = str(st.recorder("r").checkpoint(0, {"a": 1}))

    def block() -> Generator[Any, None, None]:
        holder = backend.read_txn()
        with holder:
            yield holder

    landed: list[str] = []

    def handler_reads(frame: Any, event: str, arg: Any) -> None:
        # What a signal handler landing on the abort's return runs: a read of the store.
        if event != "c_return" or getattr(arg, "__name__", "") != "abort" or landed:
            return
        if frame.f_code.co_name == "_end_lost":
            landed.append("abort")
            with st.read(cid) as cp:
                assert cp.state() == {"a": 1}

    with st.read(cid) as live:  # a read this thread holds throughout
        gen = block()
        holder = next(gen)
        holder.__del__()  # handed over as lost: this thread's own
        gen.close()
        del holder, gen
        assert len(env._lost) == 1
        sys.setprofile(handler_reads)
        try:
            with st.read(cid) as cp:  # its _end_lost: the "handler" lands in it
                assert cp.state() == {"a": 1}
        finally:
            sys.setprofile(None)
        assert landed == ["abort"]
        assert env.holds_read()  # before: ValueError above, and the live entry gone
        assert list(env._active).count(env._active[0]) == 1
        assert live.state() == {"a": 1}
    assert not env.reads_anywhere()
    assert len(env._lost) == 0
    st.close()
