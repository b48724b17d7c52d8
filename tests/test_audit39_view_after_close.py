"""audit39: a checkpoint view still open when its store is closed says the store is closed.

58dd1fc made every use after close a ``StoreClosedError``; a view entered before the
close (the closing thread's own, or one another thread's close stopped waiting for)
read its state through the closed LMDB environment and raised py-lmdb's own
``lmdb.Error("Attempt to operate on closed/deleted/dropped object")``: neither a
cpstore error nor exit 7. (A PostgreSQL view holds the rows it read: it may still
serve them, the right ones, or say the store is closed; nothing else.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import StoreClosedError


@pytest.mark.parametrize("backend", ["lmdb", "postgresql"])
def test_a_view_open_across_the_close_raises_store_closed_error(
    backend: str,
    tmp_path: Path,
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    where = str(tmp_path / "s") if backend == "lmdb" else pg_url
    st = cpstore.open(where)
    cid = str(st.recorder("r").checkpoint(0, {"a": "x" * 1000}))
    view = st.read(cid).__enter__()
    st.close()
    try:
        try:
            state = view.state()
        except StoreClosedError as exc:
            assert exc.where is not None and exc.got
        else:  # PostgreSQL: the view's rows were read before the close; nothing else
            assert backend == "postgresql" and state == {"a": "x" * 1000}
    finally:
        view.__exit__(None, None, None)
