"""keep_latest of a thread (A) with a delete_thread of it (D) and a write to it after D's
drop txn (a graph run, or copy_thread from the thread it was copied from), D's drop txn,
the write and D's sweep placed at every point of A's reclaim after D's drop (before
each re-record, each reset, the sweep, or after A). What must hold: D is never undone
(nothing written before D's drop reads back), the write after D's drop reads back
exactly, verify clean.
The copy records the same cpstore checkpoints the thread had (same run, branch name,
parents, parts): before acf37d4 it landed on the ``main`` A's reset had freed, at the
head D's drop txn saw, and D's sweep took it; before fa47a04 it landed on the ``main``
D's sweep had freed, at the head A's prune txn saw, and A's reset took it (copy only,
both backends; the runs' fresh ids never meet an old head).
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from lg_delta import graph as delta_graph
from lg_steps import prune_steps
from pg_cluster import backend_store, pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver
from cpstore.store import Store, retention


def _conf(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread}}


def _state(saver: CpstoreSaver, thread: str) -> tuple[list[str], set[str]]:
    log = list(delta_graph(saver, rare=True).get_state(_conf(thread)).values.get("log", []))
    ids = {t.config["configurable"]["checkpoint_id"] for t in saver.list(_conf(thread))}
    return log, ids


def _write(saver: CpstoreSaver, write: str, source: str, thread: str) -> None:
    if write == "run":
        delta_graph(saver, rare=True).invoke({"log": ["post"]}, _conf(thread))
    else:
        saver.copy_thread(source, thread)


def _scenario(store: Store, thread: str, write: str, where: tuple[int, int, int]) -> int:
    """D's drop txn at A's event ``at``, the write at ``w``, D's sweep at ``then``."""
    at, w, then = where
    a, b = CpstoreSaver(store), CpstoreSaver(store)
    source = f"{thread}-src"
    graph = delta_graph(a, rare=True)
    graph.invoke({"log": ["in0"]}, _conf(source))
    a.copy_thread(source, thread)
    real_delete_run = retention.delete_run
    events: list[str] = []
    inside: list[bool] = [False]
    sweeps: list[tuple[Any, ...]] = []
    dropped: list[bool] = []

    def hold(*args: Any, **kw: Any) -> int:
        sweeps.append((args, kw))
        return 0

    def d_sweep() -> None:
        while sweeps:
            args, kw = sweeps.pop(0)
            real_delete_run(*args, **kw)

    def event(name: str) -> None:
        if inside[0]:
            return
        events.append(name)
        inside[0] = True
        try:
            if len(events) == at:
                with mock.patch.object(retention, "delete_run", hold):
                    b.delete_thread(thread)  # D's drop txn; its sweeps held
                dropped.append(True)
            if len(events) == w:
                _write(b, write, source, thread)
            if len(events) == then:
                d_sweep()
        finally:
            inside[0] = False

    with prune_steps(event):
        a.prune([thread], strategy="keep_latest")
    inside[0] = True
    if at > len(events):  # D after A
        with mock.patch.object(retention, "delete_run", hold):
            b.delete_thread(thread)
        dropped.append(True)
    if w > len(events) and then > len(events) and then < w:
        d_sweep()
    if w > len(events):
        _write(b, write, source, thread)
    d_sweep()
    assert dropped
    log, ids = _state(a, thread)
    if write == "run":
        assert log == ["post", "n1"], (where, events, log)
    else:
        src_log, src_ids = _state(a, source)
        assert (log, ids) == (src_log, src_ids), (where, events)
    return len(events)


@pytest.mark.parametrize("write", ["run", "copy"])
def test_every_placement_of_a_delete_and_a_write_after_it(store: Store, write: str) -> None:
    n = _scenario(store, "probe", write, (99, 99, 99))
    assert n >= 4
    for at in range(1, n + 2):
        for w in range(at, n + 2):
            for then in range(at, n + 2):
                _scenario(store, f"t{at}.{w}.{then}", write, (at, w, then))
    report = store.verify()
    assert report.ok, report.problems[:3]
