"""The store's behaviour tests, run again on PostgreSQL: the same API, the same answers.

Each class below is imported from its LMDB test module and collected here
too, where the ``store`` fixture opens a PostgreSQL store instead (a fixture
of this module overrides the one of the module the class came from). Tests
that take ``tmp_path`` to open their own folder, or damage LMDB's file, are
left to their own module (:data:`_ENGINE_SPECIFIC`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from test_refs_integrity import (
    TestAuditedReset,
    TestCheckedRefs,
    TestForwardOnly,
    TestRefRepair,
    TestResetRace,
    TestRetainedLineage,
)
from test_store_checkpoints import (
    TestContentAddressing,
    TestForkInheritance,
    TestHostileState,
    TestLedger,
    TestManifestEncoding,
    TestPinnedPayloads,
    TestReaderLifecycle,
    TestRecorderInput,
    TestRoundTrip,
    TestStateParts,
)
from test_store_gc import TestDeleteRun, TestMarkingByRole, TestPinnedObjects, TestPrune
from test_store_history_states import TestEqualsSeparateReads, TestWhereTheWalkStops
from test_store_objects import TestBadInput, TestVerifiedReads, TestWriteOnce
from test_store_refs import TestBranches, TestCompareAndSet, TestListing
from test_store_verify import (
    TestAuditLog,
    TestCreatedAt,
    TestVerify,
    TestVerifyCheckpoint,
    TestVerifyNeverRaises,
)

from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store

__all__ = [
    "TestAuditLog",
    "TestAuditedReset",
    "TestBadInput",
    "TestBranches",
    "TestCheckedRefs",
    "TestCompareAndSet",
    "TestContentAddressing",
    "TestCreatedAt",
    "TestDeleteRun",
    "TestEqualsSeparateReads",
    "TestForkInheritance",
    "TestForwardOnly",
    "TestHostileState",
    "TestLedger",
    "TestListing",
    "TestManifestEncoding",
    "TestMarkingByRole",
    "TestPinnedObjects",
    "TestPinnedPayloads",
    "TestPrune",
    "TestReaderLifecycle",
    "TestRecorderInput",
    "TestRefRepair",
    "TestResetRace",
    "TestRetainedLineage",
    "TestRoundTrip",
    "TestStateParts",
    "TestVerify",
    "TestVerifyCheckpoint",
    "TestVerifyNeverRaises",
    "TestWhereTheWalkStops",
    "TestWriteOnce",
]


@pytest.fixture
def store(pg_url: str) -> Iterator[Store]:
    """A new PostgreSQL store (its own schema of the test cluster)."""
    with open_store(pg_url) as st:
        yield st
