"""The LangGraph savers on a PostgreSQL store: conformance and a real graph, on a real server."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.checkpoint.conformance.capabilities import Capability
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pg_cluster import Cluster, fresh_url, pg_cluster, pg_url  # noqa: F401 - fixtures
from test_langgraph_graphs import _history, _hitl_graph, _normal, _plain

from cpstore.langgraph import AsyncCpstoreSaver, CpstoreSaver


async def _sync_factory() -> AsyncGenerator[CpstoreSaver, None]:
    with CpstoreSaver.from_conn_string(fresh_url()) as saver:
        yield saver


async def _async_factory() -> AsyncGenerator[AsyncCpstoreSaver, None]:
    async with AsyncCpstoreSaver.from_conn_string(fresh_url()) as saver:
        yield saver


SAVERS: dict[str, Any] = {
    "CpstoreSaver": checkpointer_test(name="CpstoreSaver-pg")(_sync_factory),
    "AsyncCpstoreSaver": checkpointer_test(name="AsyncCpstoreSaver-pg")(_async_factory),
}


@pytest.mark.parametrize("name", sorted(SAVERS))
@pytest.mark.parametrize("capability", sorted(c.value for c in Capability))
def test_conformance_on_postgresql_every_capability_passes(
    pg_cluster: Cluster,
    name: str,
    capability: str,
) -> None:
    """Each of the eight capabilities is detected on a postgresql:// store and all tests pass."""
    report = asyncio.run(validate(SAVERS[name], capabilities={capability}))
    result = report.results[capability]
    failures = "\n".join(str(f) for f in result.failures or [])
    assert result.detected, f"{name}: {capability} not detected"
    assert result.tests_failed == 0, failures
    assert result.tests_passed > 0


def test_interrupt_and_resume_on_postgresql_equals_in_memory(pg_url: str) -> None:
    """Human in the loop on a PostgreSQL store: every snapshot as InMemorySaver's; verified."""

    def scenario(cp: Any) -> Any:
        graph = _hitl_graph(cp)
        config: dict[str, Any] = {"configurable": {"thread_id": "t1"}}
        first = graph.invoke({"items": [], "note": ""}, config, durability="sync")
        waiting = _normal(graph.get_state(config))
        final = graph.invoke(Command(resume="yes"), config, durability="sync")
        return first, waiting, final, _history(graph, config)

    expected = _plain(scenario(InMemorySaver()))
    with CpstoreSaver.from_conn_string(pg_url) as saver:
        got = _plain(scenario(saver))
        assert saver.store.path.startswith("postgresql://")
        assert saver.store.verify().ok
    assert got == expected
    assert got[2]["items"] == ["draft", "review:yes", "published"]
