"""audit64: real graphs on the async saver, many threads at once, against InMemorySaver.

Six threads of three graphs (human in the loop, a subgraph interrupting in its own
namespace, a Send fan-out) run concurrently with ``ainvoke`` and ``astream``, each
interrupted and resumed with ``Command(resume=...)``, on LMDB and PostgreSQL; each
thread's results and whole history (``aget_state_history``, subgraph namespaces
included) equal InMemorySaver's for the same graph, whatever the interleaving, and the
store verifies.
"""

from __future__ import annotations

import asyncio
from typing import Any

from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from test_langgraph_graphs import _fanout_graph, _hitl_graph, _normal, _plain, _subgraph_graph

import cpstore
from cpstore.langgraph import AsyncCpstoreSaver


async def _history(graph: Any, config: dict[str, Any]) -> list[dict[str, Any]]:
    return [_normal(s) async for s in graph.aget_state_history(config)]


async def _hitl(cp: Any, thread: str, answer: str) -> Any:
    graph = _hitl_graph(cp)
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    first = [c async for c in graph.astream({"items": [], "note": ""}, config)]
    await asyncio.sleep(0)
    waiting = _normal(await graph.aget_state(config))
    final = await graph.ainvoke(Command(resume=answer), config)
    return _plain(first), waiting, _plain(final), await _history(graph, config)


async def _sub(cp: Any, thread: str, answer: str) -> Any:
    graph = _subgraph_graph(cp)
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    await graph.ainvoke({"log": []}, config)
    state = await graph.aget_state(config, subgraphs=True)
    waiting = (_normal(state), _normal(state.tasks[0].state))
    final = [
        (tuple(n.split(":")[0] for n in ns), chunk)  # a namespace's task id is the saver's
        async for ns, chunk in graph.astream(Command(resume=answer), config, subgraphs=True)
    ]
    return waiting, _plain(final), await _history(graph, config)


async def _fan(cp: Any, thread: str, answer: str) -> Any:
    graph = _fanout_graph(cp)
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    final = await graph.ainvoke({"topics": [answer, "b", "c"], "results": []}, config)
    return sorted(final["results"]), await _history(graph, config)


_SCENARIOS = [(_hitl, "h1", "yes"), (_hitl, "h2", "no"), (_sub, "s1", "ok"),
              (_sub, "s2", "ko"), (_fan, "f1", "a"), (_fan, "f2", "z")]  # fmt: skip


async def _all(cp: Any) -> list[Any]:
    return list(await asyncio.gather(*(fn(cp, t, a) for fn, t, a in _SCENARIOS)))


def test_concurrent_graph_threads_equal_in_memory(url: str) -> None:
    """Six threads of three graphs at once: each thread as on InMemorySaver."""
    expected = asyncio.run(_all(InMemorySaver()))

    async def on_cpstore() -> list[Any]:
        async with AsyncCpstoreSaver.from_conn_string(url) as saver:
            return await _all(saver)

    got = asyncio.run(on_cpstore())
    for (fn, thread, _), want, have in zip(_SCENARIOS, expected, got, strict=True):
        assert have == want, (fn.__name__, thread)
    with cpstore.open(url) as st:
        assert st.verify().ok


class _CancelAt:
    """A saver's async puts, the ``at``-th of them raising CancelledError: after the real
    call (``done``: it ran, as a cancelled call that had begun) or instead of it."""

    def __init__(self, saver: Any, at: int, done: bool) -> None:
        self.saver, self.at, self.done, self.calls = saver, at, done, 0

    async def _call(self, fn: Any, *args: Any) -> Any:
        self.calls += 1
        if self.calls != self.at:
            return await fn(*args)
        if self.done:
            await fn(*args)
        raise asyncio.CancelledError

    def install(self) -> None:
        aput, aput_writes = self.saver.aput, self.saver.aput_writes
        self.saver.aput = lambda *a: self._call(aput, *a)
        self.saver.aput_writes = lambda *a: self._call(aput_writes, *a)


async def _cancelled_then_resumed(cp: Any, thread: str, at: int, done: bool) -> Any:
    """Run the human-in-the-loop graph with the at-th put cancelled, resume until it ends."""
    cut = _CancelAt(cp, at, done)
    cut.install()
    graph = _hitl_graph(cp)
    config: dict[str, Any] = {"configurable": {"thread_id": thread}}
    seen: list[Any] = []
    step: Any = {"items": [], "note": ""}
    for _ in range(6):
        try:
            seen.append(_plain(await graph.ainvoke(step, config, durability="sync")))
        except asyncio.CancelledError:
            seen.append("cancelled")
        state = await graph.aget_state(config)
        if state.next == ("review",) and state.tasks and state.tasks[0].interrupts:
            step = Command(resume="yes")
        elif state.next:
            step = None
        elif not state.values:
            step = {"items": [], "note": ""}
        else:
            break
    return seen, await _history(graph, config)


def test_a_graph_cancelled_at_each_put_resumes_as_in_memory(url: str) -> None:
    """Each put and pending-write call of a human-in-the-loop run cancelled in turn, once
    having stored and once not: what the thread then reads, and where it resumes to,
    equal InMemorySaver's under the same cancellation."""

    async def every(make: Any) -> list[Any]:
        out = []
        for at in range(1, 12):
            for done in (True, False):
                out.append(await _cancelled_then_resumed(make(), f"c{at}{done}", at, done))
        return out

    expected = asyncio.run(every(InMemorySaver))

    async def on_cpstore() -> list[Any]:
        async with AsyncCpstoreSaver.from_conn_string(url) as saver:
            return await every(lambda: AsyncCpstoreSaver(saver.store))

    got = asyncio.run(on_cpstore())
    assert got == expected
    assert any("cancelled" in seen for seen, _ in got)
