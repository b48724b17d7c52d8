"""Audit of store layout 6 (compact ``r`` record entries): what a damaged or rewritten
record must never lead to, on both record entry kinds (``c``: layout 5, ``r``: layout 6).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from stored import edit_raw, to_layout_5

import cpstore
from cpstore.errors import IntegrityError


def _lineage_with_a_forged_parent(path: Path, *, layout_5: bool) -> list[str]:
    """A run "keep" of four checkpoints and a run "other" of one; the head's record is
    rewritten (behind the store) so that its manifest names no parent (it then no longer
    hashes to the head's id). Returns the ids of "keep", oldest first."""
    with cpstore.open(path) as st:
        rec = st.recorder("keep")
        ids = [rec.checkpoint(i, {"a": i}) for i in range(4)]
        st.recorder("other").checkpoint(0, {"b": 1})
    if layout_5:
        to_layout_5(path)
    parent = bytes.fromhex(ids[-2])

    def forge(old: bytes | None) -> bytes:
        assert old is not None
        at = old.index(parent)
        return old[:at] + bytes(16) + old[at + 16 :]

    edit_raw(path, "checkpoints", bytes.fromhex(ids[-1]), forge)
    return ids


@pytest.mark.parametrize("kind", ["r", "c"])
def test_gc_stops_at_a_kept_record_that_does_not_hash_to_its_id(
    tmp_path: Path, kind: str
) -> None:
    """A kept head whose record is damaged stops the sweep (IntegrityError naming it):
    its damaged parent field must not make the sound ancestors look unreachable."""
    path = tmp_path / "s"
    ids = _lineage_with_a_forged_parent(path, layout_5=kind == "c")
    with cpstore.open(path) as st:
        with pytest.raises(IntegrityError) as info:
            st.delete_run("other")
        assert ids[-1] in str(info.value.where)
        for cid in ids[:-1]:
            with st.read(cid) as cp:
                assert cp.state() == {"a": ids.index(cid)}
        with pytest.raises(IntegrityError):
            st.read(ids[-1]).__enter__()
