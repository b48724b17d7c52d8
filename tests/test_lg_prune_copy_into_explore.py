"""copy_thread(S, T) into a thread T whose keep_latest (A) is running, the copy placed
at every point of A's reclaim (before each re-record, each reset, the sweep, or after
A), S and T with their own checkpoint ids, and again with T a copy of S (the copy then
records the very cpstore checkpoints T had). What must hold: everything the copy wrote
reads back with its values, so do T's kept checkpoints, verify clean. A window that
holds (also with fa47a04's reset guard off): while A's old ``main`` stands the copy's
roots fork a free branch, and once A reset it the copy's ``main`` is past A's
compare-and-set; the same head again needs a third party (a delete_thread's sweep
freeing ``main``: tests/test_lg_prune_delete_explore.py).
"""

from __future__ import annotations

from typing import Any

import pytest
from lg_delta import graph as delta_graph
from lg_steps import prune_steps
from pg_cluster import backend_store, pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver
from cpstore.store import Store


def _conf(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf = {"thread_id": thread}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _values(saver: CpstoreSaver, thread: str) -> dict[str, Any]:
    """checkpoint id -> its channel values (read by get_tuple), of every listed one."""
    out: dict[str, Any] = {}
    for t in saver.list(_conf(thread)):
        cid = t.config["configurable"]["checkpoint_id"]
        tup = saver.get_tuple(_conf(thread, cid))
        assert tup is not None, cid
        out[cid] = tup.checkpoint["channel_values"]
    return out


def _scenario(store: Store, thread: str, same: bool, at: int) -> int:
    a, b = CpstoreSaver(store), CpstoreSaver(store)
    source = f"{thread}-src"
    delta_graph(a, rare=True).invoke({"log": ["s0"]}, _conf(source))
    if same:
        a.copy_thread(source, thread)
    else:
        for i in range(2):
            delta_graph(a, rare=True).invoke({"log": [f"t{i}"]}, _conf(thread))
    src = _values(a, source)
    latest = max(_values(a, thread))
    events: list[str] = []
    inside: list[bool] = [False]

    def event(name: str) -> None:
        if inside[0]:
            return
        events.append(name)
        if len(events) == at:
            inside[0] = True
            b.copy_thread(source, thread)
            inside[0] = False

    kept_before: dict[str, Any] = {}
    with prune_steps(event):
        kept_before = {latest: _values(a, thread)[latest]}
        a.prune([thread], strategy="keep_latest")
    if at > len(events):
        b.copy_thread(source, thread)
    after = _values(a, thread)
    for cid, value in {**kept_before, **src}.items():
        assert after.get(cid) == value, (at, events, cid)
    return len(events)


@pytest.mark.parametrize("same", [False, True])
def test_every_placement_of_a_copy_into_the_pruned_thread(store: Store, same: bool) -> None:
    n = _scenario(store, "probe", same, 99)
    assert n >= 3
    for at in range(1, n + 2):
        _scenario(store, f"t{at}", same, at)
    report = store.verify()
    assert report.ok, report.problems[:3]
