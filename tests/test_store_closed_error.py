"""A use after close() is ``StoreClosedError``: its own class, with what/where/expected/got.

Every "the store is closed" refusal (the facade's, each backend's, LMDB's close under
other threads: tests/test_audit36_close_errors.py) was a bare ``StoreError`` without
expected/got, so a caller could not tell "closed" from any other store failure but by
the message text. It is still a ``StoreError`` (exit 7).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.cli import EXIT_UNAVAILABLE
from cpstore.cli.exit_codes import exit_code_for
from cpstore.errors import StoreClosedError, StoreError

_USES: dict[str, Callable[[cpstore.Store, str], Any]] = {
    "checkpoint": lambda st, _cid: st.recorder("r2").checkpoint(0, {"b": 1}),
    "read": lambda st, cid: st.read(cid).__enter__(),
    "ref": lambda st, _cid: st.ref("r"),
    "history": lambda st, _cid: st.history("r"),
    "history_states": lambda st, _cid: st.history_states("r"),
    "manifest": lambda st, cid: st.manifest(cid),
    "append_audit": lambda st, _cid: st.append_audit("note", {"x": 1}),
}


def _store_with_one_checkpoint(
    backend: str, tmp_path: Path, url: str, state: dict[str, Any]
) -> tuple[cpstore.Store, str]:
    st = cpstore.open(str(tmp_path / "s") if backend == "lmdb" else url)
    return st, str(st.recorder("r").checkpoint(0, state))


@pytest.mark.parametrize("backend", ["lmdb", "postgresql"])
@pytest.mark.parametrize("use", sorted(_USES))
def test_every_use_after_close_is_store_closed_error(
    backend: str,
    use: str,
    tmp_path: Path,
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    st, cid = _store_with_one_checkpoint(backend, tmp_path, pg_url, {"a": 1})
    st.close()
    with pytest.raises(StoreClosedError) as caught:
        _USES[use](st, cid)
    err = caught.value
    assert isinstance(err, StoreError) and exit_code_for(err) == EXIT_UNAVAILABLE
    assert err.what == "the store is closed"
    assert err.where is not None and err.expected == "an open store" and err.got


@pytest.mark.parametrize("backend", ["lmdb", "postgresql"])
def test_a_view_open_across_the_close_raises_store_closed_error(
    backend: str,
    tmp_path: Path,
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    """audit39: a view entered before the close (the closing thread's own, or one another
    thread's close stopped waiting for) read its state through the closed LMDB environment
    and raised py-lmdb's own ``lmdb.Error("Attempt to operate on closed/deleted/dropped
    object")``: neither a cpstore error nor exit 7. A PostgreSQL view holds the rows it
    read: it may still serve them, the right ones, or say the store is closed; nothing else."""
    st, cid = _store_with_one_checkpoint(backend, tmp_path, pg_url, {"a": "x" * 1000})
    view = st.read(cid).__enter__()
    st.close()
    try:
        try:
            state = view.state()
        except StoreClosedError as exc:
            assert exc.where is not None and exc.got
        else:
            assert backend == "postgresql" and state == {"a": "x" * 1000}
    finally:
        view.__exit__(None, None, None)
