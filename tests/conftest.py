"""Shared fixtures: the throwaway PostgreSQL cluster the PostgreSQL backend's tests run on."""

from __future__ import annotations

import pytest
from pg_cluster import Cluster, cluster, fresh_url


@pytest.fixture(scope="session")
def pg_cluster() -> Cluster:
    """This test process's PostgreSQL cluster (started once, destroyed at exit)."""
    return cluster()


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> str:
    """A URL naming a new, empty store (its own schema) on the test cluster."""
    return fresh_url()


#: What marks a behaviour test as LMDB's own (it opens a folder or reaches into the
#: environment): tests/test_pg_conformance.py does not run those again on PostgreSQL.
_LMDB_ONLY = ("tmp_path", ".env", "lmdb", "data.mdb", "map_size", "os.fork", "Pool(")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Leave LMDB-only tests out of the PostgreSQL re-run (deselected, and counted as such)."""
    import inspect  # noqa: PLC0415 - only collection needs it

    keep, drop = [], []
    for item in items:
        fn = getattr(item, "function", None)
        if item.nodeid.startswith("tests/test_pg_conformance.py") and fn is not None:
            module = inspect.getmodule(fn)
            helpers = [getattr(module, n, None) for n in fn.__code__.co_names]
            source = inspect.getsource(fn) + "".join(
                inspect.getsource(h)
                for h in helpers
                if inspect.isfunction(h) and h.__module__ == fn.__module__
            )
            if any(mark in source for mark in _LMDB_ONLY):
                drop.append(item)
                continue
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
