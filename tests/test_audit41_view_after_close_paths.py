"""audit41: every read of a checkpoint view left open across its store's close says the
store is closed, not py-lmdb's raw error.

audit39 (5955b7b) translated what a view reads through ``_object`` and the whole-state
fast path; a chunked value (``load_chunked``: a part or a bytes state past the chunking
size) and ``verify_objects`` (``check_checkpoint_objects``) read the closed environment
too and still raised ``lmdb.Error("Attempt to operate on closed/deleted/dropped
object")`` at the call: a caller handling StoreError inside its block (or holding a view
entered without ``with``) met a non-cpstore error. Leaving a ``with`` block, the view's
``__exit__`` translated it already, so a block that let it through got StoreClosedError.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import cpstore
from cpstore.errors import StoreClosedError

_BIG = os.urandom(300_000)  # chunked (content-defined chunks), not one object

READS: dict[str, Callable[[Any], Any]] = {
    "chunked part": lambda view: view.state_part("big"),
    "chunked parts state": lambda view: view.state(),
    "verify_objects": lambda view: view.verify_objects(),
}


@pytest.mark.parametrize("read", sorted(READS))
def test_a_view_open_across_the_close_says_so_on_every_read(tmp_path: Path, read: str) -> None:
    st = cpstore.open(str(tmp_path / "s"))
    cid = str(st.recorder("r").checkpoint(0, {"a": "x", "big": _BIG}))
    view = st.read(cid).__enter__()
    assert view._raw["state"].get("chunked"), "the test needs a chunked part"
    st.close()
    try:
        with pytest.raises(StoreClosedError) as caught:
            READS[read](view)
        assert caught.value.where is not None and caught.value.got
    finally:
        view.__exit__(None, None, None)


def test_a_chunked_bytes_state_open_across_the_close_says_so(tmp_path: Path) -> None:
    st = cpstore.open(str(tmp_path / "s"))
    cid = str(st.recorder("r").checkpoint(0, _BIG))
    view = st.read(cid).__enter__()
    assert view._raw["state"].get("chunked"), "the test needs a chunked state"
    st.close()
    try:
        with pytest.raises(StoreClosedError):
            view.state()
    finally:
        view.__exit__(None, None, None)
