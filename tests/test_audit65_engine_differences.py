"""The engine differences docs/store.md lists ("PostgreSQL backend", "Engine differences").

The differential state machine (test_audit65_backend_differential.py) tolerates
exactly these; each is pinned here so a change of either engine shows up.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pg_cluster import fresh_url, pg_cluster  # noqa: F401 - fixture

import cpstore
from cpstore.errors import StoreError


@pytest.mark.parametrize(
    ("second", "message"),
    [({"readonly": True}, "another mode"), ({"durability": "none"}, "another durability")],
)
def test_lmdb_refuses_a_second_open_in_another_mode_in_one_process(
    tmp_path: Path, second: dict[str, object], message: str
) -> None:
    """One environment per data file per process: the second open's mode must match."""
    path = str(tmp_path / "store")
    with cpstore.open(path), pytest.raises(StoreError, match=message) as caught:
        cpstore.open(path, **second)  # type: ignore[arg-type]
    assert caught.value.where == path


@pytest.mark.parametrize("second", [{"readonly": True}, {"durability": "none"}])
def test_postgres_opens_a_second_handle_in_another_mode_in_one_process(
    pg_cluster: object,  # noqa: F811 - fixture
    second: dict[str, object],
) -> None:
    """Each PostgreSQL handle is its own pool: both opens succeed and see the same store."""
    url = fresh_url()
    with cpstore.open(url) as store:
        rec = store.recorder("r")
        head = rec.checkpoint(1, {"a": 1})
        rec.close()
        with cpstore.open(url, **second) as other:  # type: ignore[arg-type]
            assert other.ref("r") == head
            assert other.readonly is bool(second.get("readonly", False))
