"""review95: the reader slots of many kept reads, once their slices were released.

A slice kept from ``token_value_views()`` keeps its read open (slices93), and with it one
of the lock file's 1,022 reader slots. Released, each read is handed over as lost and the
next read or write aborts it (review93), but py-lmdb keeps an aborted read's slot until
its txn object is freed, and ``_drop_unused_txns`` freed at most two such objects per
read or write: after a caller let go of a thousand kept slices the slots stayed taken,
and a thread holding a few reads at once failed MDB_READERS_FULL until some five hundred
further reads or writes had freed them. The read that ends the lost reads now frees every
txn object nobody holds (one pass over ``EnvTxns._txns``, only when reads were lost).
"""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path
from typing import Any

import cpstore

_HELD = 30


def _slots(st: Any) -> int:
    """Reader slots of the lock file this process holds (mdb_reader_list's rows)."""
    return len(st._backend.env.env.readers().splitlines()) - 1


def test_slots_of_released_kept_reads_are_free_for_the_next_reads(tmp_path: Path) -> None:
    st = cpstore.open(tmp_path / "s", map_size=1 << 24)
    try:
        rec = st.recorder("r")
        for i in range(40):
            rec.token("rng", f"value {i}")
        cid = str(rec.checkpoint(0, {"a": 1}))
        rec.close()
        kept: list[memoryview] = []
        for _ in range(1000):  # most of the 1,022 slots, each kept by a slice
            with st.read(cid) as cp:
                kept.append(cp.token_value_views()[0][1:])
        assert _slots(st) >= 1000
        kept.clear()  # every slice released: the reads are lost, to end at the next read
        with st.read(cid) as cp:
            assert cp.token_count() == 40
        with ExitStack() as stack:  # a thread holding reads at once: each needs a slot
            views = [stack.enter_context(st.read(cid)) for _ in range(_HELD)]
            assert [v.token_count() for v in views] == [40] * _HELD
        assert _slots(st) < 10
    finally:
        st.close()
