"""review90: a checkpoint view's zero-copy views when its read is handed over as lost.

``CheckpointView.__exit__`` releases every zero-copy view it handed out
(``token_value_views``, ``token_records``): one a caller kept past the block then refuses
to read ("released memoryview") rather than read the pages of an ended txn, which a writer
may reuse and a map resize unmaps. intr89's ``__del__`` (the exit interrupted at its start,
the view freed with the exception) ended the lease and handed the read over
(``EnvTxns.lost_read``), but left those views live: the txn was then aborted (this thread's
next read) and a kept view still read its pages."""

from __future__ import annotations

import gc
from pathlib import Path
from typing import Any

import pytest
from test_begin_interrupted import landing_at_start

import cpstore


def _kept_views(st: Any, cid: str, kept: list[memoryview], interrupted: bool) -> None:
    def block() -> None:
        with st.read(cid) as cp:
            kept.append(cp.token_value_views()[0])
            kept.append(cp.token_records())

    if interrupted:
        assert landing_at_start("CheckpointView.__exit__", block)
        gc.collect()
    else:
        block()


@pytest.mark.parametrize("interrupted", [False, True])
def test_a_view_kept_past_its_block_refuses_to_read_once_the_read_ends(
    tmp_path: Path, interrupted: bool
) -> None:
    st = cpstore.open(tmp_path / "s")
    rec = st.recorder("r")
    for i in range(20):
        rec.token("rng", i)
    cid = str(rec.checkpoint(0, {"a": 1}))
    kept: list[memoryview] = []
    _kept_views(st, cid, kept, interrupted)
    with st._backend.read_txn() as txn:  # this thread's next read: the lost one ends
        txn.get(b"x")
    assert len(kept) == 2
    for view in kept:
        assert type(view) is memoryview  # zero-copy: this open has LMDB's lock file
        with pytest.raises(ValueError, match="released"):
            bytes(view)  # before (interrupted): the pages of the aborted txn
    st.close()
