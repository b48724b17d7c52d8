"""An LMDB error raised while a batched flush applies its batch is the batch's own failure.

``BatchOwners.applying`` requeues a batch whose apply raised a *foreign* exception (an
interrupt, a signal handler's), since nothing of it was written and its owners will flush
it again. A raw ``lmdb.Error`` is not a CpstoreError either, so it counted as foreign: the
flush raised IntegrityError ("the LMDB data file is corrupt", the translated error, which
drops a batch: docs/durability.md) and yet left the batch queued, and the next flush
stored what its owners had been told failed (found by chaosflake). Now only LMDB's
errors are the engine's: the batch is dropped, as the error says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lmdb
import pytest

import cpstore
from cpstore.errors import IntegrityError


def test_an_lmdb_error_in_the_apply_drops_the_batch_it_reports_failed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    st = cpstore.open(tmp_path / "s", durability="batched", batch_size=100)
    try:
        rec = st.recorder("r")
        rec.checkpoint(1, {"a": 1})
        rec.checkpoint(2, {"a": 2})
        backend: Any = st.backend
        real = backend._apply
        calls: list[int] = []

        def apply_once(txn: Any, ops: Any) -> None:
            calls.append(len(ops))
            if len(calls) == 1:
                raise lmdb.CorruptedError("injected")
            real(txn, ops)

        monkeypatch.setattr(backend, "_apply", apply_once)
        with pytest.raises(IntegrityError):
            st.flush()
        # Before: 2 still queued, and the next flush stored them.
        assert backend.pending == 0
        st.flush()
        assert calls == [2]
        assert st.ref("r") is None
    finally:
        st.close()
