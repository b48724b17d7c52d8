"""The put path's must_exist skip on a PostgreSQL store (the same commit rule as LMDB)."""

from __future__ import annotations

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from test_put_path_audit import _aba


@pytest.mark.parametrize("durability", ["sync", "batched"])
def test_aba_head_moves_and_sweeps_on_postgresql_leave_every_checkpoint_whole(
    pg_url: str, durability: str
) -> None:
    """Two processes extending one head beside a process moving it away and back, releasing and
    sweeping it, on PostgreSQL: every stored checkpoint names only stored objects."""
    _aba(pg_url, durability, seconds=8.0, resets=0)  # PostgreSQL: too slow to count on one
