"""The store's behaviour tests, run again on PostgreSQL: the same API, the same answers.

Each class below is imported from its LMDB test module and collected here
too, as a subclass defined in this module, so the ``store`` fixture below (a
PostgreSQL store) replaces the LMDB one of the module the class came from.
Tests that open their own folder or reach into LMDB stay in their own module
(:func:`_lmdb_only`); the backend's own damage tests are tests/test_pg_store.py.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

import pytest
import test_refs_integrity
import test_store_checkpoints
import test_store_gc
import test_store_history_states
import test_store_objects
import test_store_read_fast_paths
import test_store_refs
import test_store_verify
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    """A new PostgreSQL store (its own schema of the test cluster)."""
    with open_store(pg_url) as st:
        yield st


#: Source text that marks a test as LMDB's own: it opens a folder, reaches into the
#: environment or forks around it. Those stay in their own module.
_LMDB_ONLY = ("tmp_path", ".env", "lmdb", "data.mdb", "map_size", "os.fork", "Pool(")


def _lmdb_only(fn: Any) -> bool:
    """True when ``fn`` or a helper function of its module that it calls is LMDB's own."""
    module = inspect.getmodule(fn)
    helpers = [getattr(module, n, None) for n in fn.__code__.co_names]
    source = inspect.getsource(fn) + "".join(
        inspect.getsource(h)
        for h in helpers
        if inspect.isfunction(h) and h.__module__ == fn.__module__
    )
    return any(mark in source for mark in _LMDB_ONLY)


def _on_postgres(cls: type) -> type:
    """``cls`` with its LMDB-only tests removed, collected here with this module's fixtures."""
    dropped = {
        name: None
        for name in dir(cls)
        if name.startswith("test_") and _lmdb_only(getattr(cls, name))
    }
    return type(cls.__name__, (cls,), {"__doc__": cls.__doc__, **dropped})


#: (module, class) of every behaviour-test class run again here.
CLASSES = [
    (test_refs_integrity, "TestAuditedReset"),
    (test_refs_integrity, "TestCheckedRefs"),
    (test_refs_integrity, "TestForwardOnly"),
    (test_refs_integrity, "TestRefRepair"),
    (test_refs_integrity, "TestResetRace"),
    (test_refs_integrity, "TestRetainedLineage"),
    (test_store_checkpoints, "TestContentAddressing"),
    (test_store_checkpoints, "TestForkInheritance"),
    (test_store_checkpoints, "TestHostileState"),
    (test_store_checkpoints, "TestLedger"),
    (test_store_checkpoints, "TestManifestEncoding"),
    (test_store_checkpoints, "TestPinnedPayloads"),
    (test_store_checkpoints, "TestReaderLifecycle"),
    (test_store_checkpoints, "TestRecorderInput"),
    (test_store_checkpoints, "TestRoundTrip"),
    (test_store_checkpoints, "TestStateParts"),
    (test_store_gc, "TestDeleteRun"),
    (test_store_gc, "TestMarkingByRole"),
    (test_store_gc, "TestPinnedObjects"),
    (test_store_gc, "TestPrune"),
    (test_store_history_states, "TestEqualsSeparateReads"),
    (test_store_history_states, "TestWhereTheWalkStops"),
    (test_store_objects, "TestBadInput"),
    (test_store_read_fast_paths, "TestHistoryMemo"),
    (test_store_objects, "TestVerifiedReads"),
    (test_store_objects, "TestWriteOnce"),
    (test_store_refs, "TestBranches"),
    (test_store_refs, "TestCompareAndSet"),
    (test_store_refs, "TestListing"),
    (test_store_verify, "TestAuditLog"),
    (test_store_verify, "TestCreatedAt"),
    (test_store_verify, "TestVerify"),
    (test_store_verify, "TestVerifyCheckpoint"),
    (test_store_verify, "TestVerifyNeverRaises"),
]
for _module, _name in CLASSES:
    globals()[_name] = _on_postgres(getattr(_module, _name))


def test_most_behaviour_tests_run_again_on_postgres() -> None:
    """The re-run keeps at least 75 test functions (a change that drops many shows up here)."""
    kept = [
        name
        for _module, cls_name in CLASSES
        for name in dir(globals()[cls_name])
        if name.startswith("test_") and callable(getattr(globals()[cls_name], name))
    ]
    assert len(kept) >= 75
