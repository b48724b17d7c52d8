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


@pytest.mark.parametrize("backend", ["lmdb", "postgresql"])
@pytest.mark.parametrize("use", sorted(_USES))
def test_every_use_after_close_is_store_closed_error(
    backend: str,
    use: str,
    tmp_path: Path,
    pg_url: str,  # noqa: F811 - the fixture
) -> None:
    where = str(tmp_path / "s") if backend == "lmdb" else pg_url
    st = cpstore.open(where)
    cid = str(st.recorder("r").checkpoint(0, {"a": 1}))
    st.close()
    with pytest.raises(StoreClosedError) as caught:
        _USES[use](st, cid)
    err = caught.value
    assert isinstance(err, StoreError) and exit_code_for(err) == EXIT_UNAVAILABLE
    assert err.what == "the store is closed"
    assert err.where is not None and err.expected == "an open store" and err.got
