"""Pieces the LangGraph thread-diff tests share (lgdiff83, review84): a log-only state,
a thread's config, the ``fast``-beside-``asks`` graph, the subgraph stopped by ``asks``
(lgleft87, lgleft88), a thread's copy under a chosen id policy, a resume's log and runs,
and the check that every ``updated_channels`` set a saver holds is the one LangGraph's
loop writes."""

from __future__ import annotations

import operator
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterable
from typing import Annotated, Any, TypedDict

from langgraph.checkpoint.base import copy_checkpoint
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, Send, interrupt

from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._diff_triggers import head_of
from cpstore.langgraph._diff_updated import _moved, _unlike, _updated
from cpstore.langgraph._read import entry_at, stored_writes

#: The task id LangGraph stores input and ``Command`` writes under.
NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"


class LogState(TypedDict):
    log: Annotated[list[str], operator.add]


def cfg(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def newest_id(saver: CpstoreSaver, thread: str) -> str:
    """The id of ``thread``'s newest checkpoint."""
    tup = saver.get_tuple(cfg(thread))
    assert tup is not None
    return str(tup.config["configurable"]["checkpoint_id"])


def started(
    app: Any,
    saver: CpstoreSaver,
    threads: Iterable[str],
    *then: Any,
    moved_past: Iterable[str] = (),
) -> dict[str, str]:
    """Each of ``threads`` invoked with ``{"log": ["in"]}``, then with each of ``then`` in
    turn: the ids of their newest checkpoints; then each thread of ``moved_past`` moved
    past it by a copy of it (``__copy__``)."""
    ids: dict[str, str] = {}
    for t in threads:
        app.invoke({"log": ["in"]}, cfg(t))
        for value in then:
            app.invoke(value, cfg(t))
        ids[t] = newest_id(saver, t)
    for t in moved_past:
        app.update_state(cfg(t, ids[t]), None, as_node="__copy__")
    return ids


def invoked(
    app: Any, runs: list[str], value: Any, conf: Any, *, sort: bool = False
) -> tuple[list[str], list[str], list[str]]:
    """``app`` invoked with ``value`` on ``conf``: its log (sorted when ``sort``), the
    values of the interrupts it asks, and the ``runs`` it made."""
    runs.clear()
    out = app.invoke(value, conf)
    log = sorted(out["log"]) if sort else out["log"]
    return log, [str(i.value) for i in out.get("__interrupt__", ())], list(runs)


def a_then_n(
    saver: CpstoreSaver | None,
    a: Callable[..., Any],
    n: Callable[..., Any],
    *,
    state: Any = LogState,
    after_n: Callable[[Any], str] | None = None,
) -> Any:
    """``a`` then ``n``, stopped before ``n``; then the end, or (``after_n``) the one of
    ``a`` and the end it names."""
    g = StateGraph(state)
    g.add_node("a", a)
    g.add_node("n", n)
    g.add_edge(START, "a")
    g.add_edge("a", "n")
    if after_n is None:
        g.add_edge("n", END)
    else:
        g.add_conditional_edges("n", after_n, ["a", END])
    return g.compile(checkpointer=saver, interrupt_before=["n"])


def lg_diff(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``cpstore lg-diff *args --store url`` run as a command."""
    return subprocess.run(
        [sys.executable, "-m", "cpstore.cli", "lg-diff", *args, "--store", url],
        capture_output=True,
        text=True,
        check=False,
    )


def put_copy(
    saver: CpstoreSaver,
    src: str,
    dst: str,
    *,
    new_ids: bool = False,
    task_id: Callable[[str, str], str] = lambda tid, path: tid,
    writes: bool = True,
    edit: Callable[[Any], None] | None = None,
) -> None:
    """``src``'s chain put as ``dst`` through ``put``/``put_writes`` (as LangGraph's loop
    puts them: every channel's version passed as new), the checkpoints under new ids when
    ``new_ids``, each write under ``task_id(its task id, its task path)`` with its task
    path kept (none when not ``writes``), ``edit(checkpoint)`` applied to the newest
    first (lgleft86: a version set by hand)."""
    meta = saver.store.backend.db("meta")
    parent: str | None = None
    chain = list(saver.list(cfg(src)))[::-1]
    for i, tup in enumerate(chain):
        cp = copy_checkpoint(tup.checkpoint)
        if new_ids:
            cp["id"] = str(uuid.uuid1())
        if edit is not None and i == len(chain) - 1:
            edit(cp)
        out = saver.put(cfg(dst, parent), cp, tup.metadata, dict(cp["channel_versions"]))
        parent = out["configurable"]["checkpoint_id"]
        if not writes:
            continue
        with saver.store.backend.read_txn() as txn:
            held = stored_writes(txn, meta, src, "", tup.config["configurable"]["checkpoint_id"])
        for w in held:
            value = saver.serde.loads_typed((w.typed[0], bytes(w.typed[1])))
            tid = task_id(w.task_id, w.task_path)
            saver.put_writes(out, [(w.channel, value)], tid, task_path=w.task_path)


def resumed(app: Any, runs: list[str], thread: str) -> tuple[list[str], list[str]]:
    """``thread`` resumed with ``"ok"``: its log, sorted, and the ``runs`` it made."""
    runs.clear()
    out = app.invoke(Command(resume="ok"), cfg(thread))["log"]
    return sorted(out), list(runs)


def fast_beside_asks(saver: CpstoreSaver, runs: list[str], *, sends: bool = False) -> Any:
    """``fast`` finishes beside ``asks``, which interrupts (``runs`` counts ``fast``);
    ``sends``: ``fast`` is run by a ``Send`` from ``START``."""

    def fast(_: LogState) -> dict[str, Any]:
        runs.append("fast")
        return {"log": ["fast"]}

    def asks(_: LogState) -> dict[str, Any]:
        return {"log": ["asked " + str(interrupt("ok?"))]}

    g = StateGraph(LogState)
    g.add_node("fast", fast)
    g.add_node("asks", asks)
    if sends:
        g.add_conditional_edges(START, lambda _: [Send("fast", {}), "asks"], ["fast", "asks"])
    else:
        g.add_edge(START, "fast")
        g.add_edge(START, "asks")
    return g.compile(checkpointer=saver)


def asks_subgraph(runs: list[str], shape: str, *, kept: bool) -> Any:
    """A subgraph (``checkpointer=True`` when ``kept``) stopped by ``asks``'s interrupt:
    beside a finished ``fast`` (``shape`` "fast"), after ``pre`` ran a step ("pre"), or
    alone ("alone"); ``runs`` counts each node's runs."""

    def node(name: str) -> Any:
        def run(_: LogState) -> dict[str, Any]:
            runs.append(name)
            if name == "asks":
                return {"log": ["asked " + str(interrupt("ok?"))]}
            return {"log": [name]}

        return run

    s = StateGraph(LogState)
    s.add_node("asks", node("asks"))
    if shape == "fast":
        s.add_node("fast", node("fast"))
        s.add_edge(START, "fast")
        s.add_edge(START, "asks")
    elif shape == "pre":
        s.add_node("pre", node("pre"))
        s.add_edge(START, "pre")
        s.add_edge("pre", "asks")
    else:
        s.add_edge(START, "asks")
    return s.compile(checkpointer=True if kept else None)


def with_subgraph(saver: CpstoreSaver, runs: list[str], shape: str, *, kept: bool = True) -> Any:
    """:func:`asks_subgraph` as the node ``sub`` of a graph on ``saver``."""
    g = StateGraph(LogState)
    g.add_node("sub", asks_subgraph(runs, shape, kept=kept))
    g.add_edge(START, "sub")
    return g.compile(checkpointer=saver)


def with_nested_subgraph(
    saver: CpstoreSaver, runs: list[str], *, outer: bool, inner: bool, name: str = "sub"
) -> Any:
    """:func:`asks_subgraph` ("pre"; ``checkpointer=True`` when ``inner``) as the node
    ``inner`` of a subgraph (``checkpointer=True`` when ``outer``), itself the node ``name``
    of a graph on ``saver``."""
    mid = StateGraph(LogState)
    mid.add_node("inner", asks_subgraph(runs, "pre", kept=inner))
    mid.add_edge(START, "inner")
    g = StateGraph(LogState)
    g.add_node(name, mid.compile(checkpointer=True if outer else None))
    g.add_edge(START, name)
    return g.compile(checkpointer=saver)


def unlike_sets(saver: CpstoreSaver) -> tuple[int, dict[tuple[str, str, Any], str]]:
    """Every checkpoint of ``saver`` whose stored ``updated_channels`` is a set: how many,
    and those the diff finds unlike what their step moved, (thread, ns, step) → why."""
    store, meta = saver.store, saver.store.backend.db("meta")
    odd: dict[tuple[str, str, Any], str] = {}
    checked = 0
    with store.backend.read_txn() as txn:
        for tup in saver.list(None):
            conf, md = tup.config["configurable"], tup.metadata
            at = conf["thread_id"], conf["checkpoint_ns"], conf["checkpoint_id"]
            entry = entry_at(txn, meta, *at)
            if entry is None:
                raise AssertionError(f"no index entry for {at}")
            head = head_of(txn, store, saver.serde, entry)
            stored_set = _updated(head, "head")
            if stored_set is None:
                continue
            checked += 1
            held = set(tup.checkpoint["channel_values"])
            delta = frozenset(md.get("counters_since_delta_snapshot") or {})
            got = _moved(txn, store, saver.serde, (entry, head), (held, delta))
            nulls = {w.channel for w in stored_writes(txn, meta, *at) if w.task_id == NULL_TASK_ID}
            unlike = _unlike("X", got, (stored_set, stored_set | nulls))
            if unlike is not None:
                odd[at[0], at[1], md.get("step")] = unlike[0]
    return checked, odd
