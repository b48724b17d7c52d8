"""Records that land by push or pull carry location hints, as committed ones do.

A landing record's hint block names the heap seqs of its state parts
(content.py), so a verified whole-state read of a pulled checkpoint takes one
heap get per part, not an index lookup and a heap get.
"""

from __future__ import annotations

from pathlib import Path

from test_transfer_heap import _record

import cpstore
from cpstore.cli import main
from cpstore.store.content import objects_of, records_of


def _record_in(path: Path, run: str, steps: int) -> list[str]:
    with cpstore.open(path) as st:
        return _record(st, run, steps)


def _hints_and_seqs(path: Path, cid: str) -> tuple[list[int], list[int]]:
    """(the record's hints, the heap seqs of its parts through the index) in map order."""
    with cpstore.open(path, readonly=True) as st, st.backend.read_txn() as txn:
        dbs = st.backend.dbs
        _, block = records_of(dbs).hinted(txn, bytes.fromhex(cid))
        with st.read(cid) as cp:
            keys = list(cp.manifest.raw["state"]["parts"].values())
        seqs = [int.from_bytes(bytes(txn.get(k, db=dbs["oloc"])), "big") for k in keys]
        return [int.from_bytes(block[i : i + 4], "big") for i in range(0, len(block), 4)], seqs


def test_pushed_records_carry_the_heap_seqs_of_their_parts(tmp_path: Path) -> None:
    """After a push, every landed record's hints equal its parts' locations."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    ids = _record_in(src, "r", 4)
    _record_in(dst, "other", 2)  # the destination's heap already has entries: seqs differ
    assert main(["push", "--store", str(src), str(dst)]) == 0
    for cid in ids:
        hints, seqs = _hints_and_seqs(dst, cid)
        assert hints == seqs and all(hints)
        with cpstore.open(dst, readonly=True) as st, st.read(cid) as cp:
            state = cp.state()
            assert isinstance(state, dict) and state["b"] == ids.index(cid)


def test_a_hint_of_a_pulled_record_names_an_object_entry_of_that_part(tmp_path: Path) -> None:
    """Each hinted heap entry is the object entry of the part it stands for."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    ids = _record_in(src, "r", 2)
    assert main(["pull", "--store", str(dst), str(src)]) == 0
    with cpstore.open(dst, readonly=True) as st, st.backend.read_txn() as txn:
        dbs = st.backend.dbs
        for cid in ids:
            _, block = records_of(dbs).hinted(txn, bytes.fromhex(cid))
            with st.read(cid) as cp:
                keys = list(cp.manifest.raw["state"]["parts"].values())
            for i, key in enumerate(keys):
                seq = bytes(4) + block[4 * i : 4 * i + 4]
                entry = bytes(txn.get(seq, db=dbs["heap"]))
                assert entry[:18] == bytes((objects_of(dbs).kind, 16)) + key
