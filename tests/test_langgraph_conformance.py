"""LangGraph's published conformance suite (langgraph-checkpoint-conformance) on both savers."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES, Capability

from cpstore.langgraph import AsyncCpstoreSaver, CpstoreSaver


async def _sync_factory() -> AsyncGenerator[CpstoreSaver, None]:
    with (
        tempfile.TemporaryDirectory() as folder,
        CpstoreSaver.from_conn_string(f"{folder}/store", durability="none") as saver,
    ):
        yield saver


async def _async_factory() -> AsyncGenerator[AsyncCpstoreSaver, None]:
    with tempfile.TemporaryDirectory() as folder:
        async with AsyncCpstoreSaver.from_conn_string(f"{folder}/store") as saver:
            yield saver


# Registered as the suite's README shows (@checkpointer_test), without the decorator syntax
# only because the suite ships no type information.
SAVERS: dict[str, Any] = {
    "CpstoreSaver": checkpointer_test(name="CpstoreSaver")(_sync_factory),
    "AsyncCpstoreSaver": checkpointer_test(name="AsyncCpstoreSaver")(_async_factory),
}


@pytest.mark.parametrize("name", sorted(SAVERS))
@pytest.mark.parametrize("capability", sorted(c.value for c in Capability))
def test_conformance_capability_is_detected_and_every_test_passes(
    name: str, capability: str
) -> None:
    """Each of the eight capabilities is detected on both savers and all its tests pass."""
    report = asyncio.run(validate(SAVERS[name], capabilities={capability}))
    result = report.results[capability]
    failures = "\n".join(str(f) for f in result.failures or [])
    assert result.detected, f"{name}: {capability} not detected"
    assert result.tests_failed == 0, failures
    assert result.tests_passed > 0
    assert result.passed is True


def test_the_suite_knows_eight_capabilities() -> None:
    """The suite we run is the eight-capability one the issue asks for (a newer one is noticed)."""
    assert len(ALL_CAPABILITIES) == 8
