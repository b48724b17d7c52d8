"""Two keep_latest prunes of one DeltaChannel thread (no snapshot yet: the whole chain
is kept and re-recorded), the second's prune txn and its reclaim placed at every pair of
points of the first's reclaim (before each re-record, each reset, the sweep, or after
the first is done). Every placement ends with the log the runs wrote, every checkpoint
listed, verify clean. Before fa47a04, a placement whose second re-record landed on the
``main`` the first had freed at the head the second's prune txn read (a kept root is the
same cpstore checkpoint again) lost the thread's checkpoints.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

from lg_delta import graph as delta_graph
from lg_steps import prune_steps
from pg_cluster import backend_store, pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver, _maintain
from cpstore.store import Store


def _state(saver: CpstoreSaver, thread: str) -> tuple[list[str], set[str]]:
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    log = list(delta_graph(saver, rare=True).get_state(config).values.get("log", []))
    ids = {t.config["configurable"]["checkpoint_id"] for t in saver.list(config)}
    return log, ids


def _scenario(store: Store, thread: str, at: int, then: int) -> tuple[int, list[str]]:
    """A's reclaim with B's prune txn at A's event ``at`` and B's reclaim at ``then``
    (events: each re-record, each reset, the sweep; past the last: after A)."""
    a, b = CpstoreSaver(store), CpstoreSaver(store)
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    graph = delta_graph(a, rare=True)
    for i in range(2):
        graph.invoke({"log": [f"in{i}"]}, config)
    log, ids = _state(a, thread)
    real_reclaim = _maintain._reclaim
    events: list[str] = []
    held: list[tuple[Any, ...]] = []
    inside: list[bool] = [False]

    def hold(*args: Any) -> None:
        held.append(args)

    def event(name: str) -> None:
        if inside[0]:
            return
        events.append(name)
        inside[0] = True
        try:
            if len(events) == at:
                with mock.patch.object(_maintain, "_reclaim", hold):
                    b.prune([thread], strategy="keep_latest")
            if len(events) == then and held:
                real_reclaim(*held.pop())
        finally:
            inside[0] = False

    with prune_steps(event):
        a.prune([thread], strategy="keep_latest")
        if held:  # B's reclaim after A
            inside[0] = True
            real_reclaim(*held.pop())
    assert _state(a, thread) == (log, ids), (at, then, events)
    assert graph.get_state(config).values["log"] == log
    return len(events), log


def test_every_placement_of_a_second_prune(store: Store) -> None:
    n, log = _scenario(store, "probe", 0, 0)
    assert len(log) == 4 and n >= 4
    for at in range(1, n + 1):
        for then in range(at, n + 2):
            _scenario(store, f"t{at}.{then}", at, then)
    report = store.verify()
    assert report.ok, report.problems[:3]
