"""The saver's read paths of branch lgread, on both backends.

``get_tuple`` reads with a single-use Loader (no values kept for a next tuple);
a ``list`` batch seeks once per namespace for pending writes and skips the
per-checkpoint seek when the namespace has none. These pin that every tuple
still carries exactly its own writes whatever the namespaces around it hold, and
that a caller changing what it got never changes what the next read returns.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore.store as cpstore_store
from cpstore.langgraph import CpstoreSaver
from cpstore.store import Store

THREAD = "t-read"
#: Namespaces in the order a list without ``checkpoint_ns`` yields them (descending),
#: those without writes and those with them alternating, one without first.
WRITES_IN = {"c": False, "b": True, "a": False, "": True}


@pytest.fixture(params=["lmdb", "postgresql"])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CpstoreSaver]:
    """A saver on a fresh store of each backend."""
    url = str(tmp_path / "s") if request.param == "lmdb" else str(request.getfixturevalue("pg_url"))
    store = cpstore_store.open(url)
    assert isinstance(store, Store)
    yield CpstoreSaver(store)
    store.close()


def _cfg(ns: str | None = "", checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": THREAD}
    if ns is not None:
        conf["checkpoint_ns"] = ns
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _record(saver: CpstoreSaver, ns: str, steps: int, *, writes: bool) -> dict[str, list[Any]]:
    """``steps`` puts on ``ns`` (a str, a list, a dict and a message list channel); with
    ``writes``, every other checkpoint gets a task's writes. Returns id -> its writes."""
    values: dict[str, Any] = {
        "text": "t0",
        "items": [0],
        "doc": {"k": [0]},
        "messages": [HumanMessage(content="m0", id="m0")],
    }
    versions = dict.fromkeys(values, 1)
    config = _cfg(ns)
    out: dict[str, list[Any]] = {}
    for step in range(steps):
        name = list(values)[step % 4]
        if step:
            values[name] = {
                "text": f"text {ns} {step}",
                "items": [step],
                "doc": {"k": [step]},
                "messages": [*values["messages"], AIMessage(content=f"m{step}", id=f"m{step}")],
            }[name]
            versions[name] += 1
        cp = empty_checkpoint()
        cp["channel_values"] = dict(values)
        cp["channel_versions"] = dict(versions)
        new = dict(versions) if step == 0 else {name: versions[name]}
        config = saver.put(config, cp, {"source": "loop", "step": step}, new)
        checkpoint_id = config["configurable"]["checkpoint_id"]
        out[checkpoint_id] = []
        if writes and step % 2:
            saver.put_writes(config, [("items", [ns, step])], f"task-{ns}-{step}")
            out[checkpoint_id] = [(f"task-{ns}-{step}", "items", [ns, step])]
    return out


def _recorded(saver: CpstoreSaver, steps: int = 6) -> dict[str, dict[str, list[Any]]]:
    return {ns: _record(saver, ns, steps, writes=w) for ns, w in WRITES_IN.items()}


def test_each_listed_tuple_carries_exactly_its_own_writes(saver: CpstoreSaver) -> None:
    """Per namespace and across namespaces (with and without writes, alternating)."""
    recorded = _recorded(saver)
    for ns, writes in recorded.items():
        listed = list(saver.list(_cfg(ns)))
        assert [t.config["configurable"]["checkpoint_id"] for t in listed] == list(writes)[::-1]
        assert {t.config["configurable"]["checkpoint_id"]: t.pending_writes for t in listed} == (
            writes
        )
    everything = list(saver.list(_cfg(None)))
    assert [t.config["configurable"]["checkpoint_ns"] for t in everything] == [
        ns for ns in WRITES_IN for _ in recorded[ns]
    ]
    for tup in everything:
        conf = tup.config["configurable"]
        assert tup.pending_writes == recorded[conf["checkpoint_ns"]][conf["checkpoint_id"]]
        got = saver.get_tuple(tup.config)
        assert got is not None and got.pending_writes == tup.pending_writes
        assert got == tup


def test_a_write_put_between_two_lists_shows_in_the_second(saver: CpstoreSaver) -> None:
    """The namespace's 'no writes' answer belongs to one read, never to the saver."""
    recorded = _recorded(saver, 3)
    first = list(saver.list(_cfg("a")))
    assert all(t.pending_writes == [] for t in first)
    saver.put_writes(first[-1].config, [("text", "late")], "task-late")
    second = list(saver.list(_cfg("a")))
    assert [t.pending_writes for t in second] == [[], [], [("task-late", "text", "late")]]
    assert next(iter(recorded["a"])) == second[-1].config["configurable"]["checkpoint_id"]


def test_a_changed_tuple_never_changes_the_next_read(saver: CpstoreSaver) -> None:
    """Callers mutate what they get (LangGraph does): get_tuple and list give fresh
    checkpoints, metadata, configs, writes and values every time."""
    ids = list(_recorded(saver, 5)["b"])

    def latest() -> CheckpointTuple | None:
        return saver.get_tuple(_cfg("b"))

    def by_id() -> CheckpointTuple | None:
        return saver.get_tuple(_cfg("b", ids[3]))

    def listed_second() -> CheckpointTuple | None:
        return next(iter(saver.list(_cfg("b"), before=_cfg("b", ids[-1]))))

    for read in (latest, by_id, listed_second):
        tup = read()
        assert tup is not None
        pristine = copy.deepcopy(tup)
        values = tup.checkpoint["channel_values"]
        values["text"] = "changed"
        values["items"].append("changed")
        values["doc"]["k"].append("changed")
        values["messages"][0].content = "changed"
        values["new"] = 1
        tup.checkpoint["channel_versions"]["text"] = "changed"
        tup.checkpoint["id"] = "changed"
        tup.metadata["step"] = -5
        tup.config["configurable"]["checkpoint_id"] = "changed"
        assert tup.parent_config is not None
        tup.parent_config["configurable"]["thread_id"] = "changed"
        tup.pending_writes.append(("x", "y", "z"))
        again = read()
        assert again == pristine
        listed = list(saver.list(_cfg("b")))
        assert saver.get_tuple(_cfg("b")) == listed[0]
        assert all(t.checkpoint["channel_values"] is not values for t in listed)


def test_tuples_of_one_list_share_no_changeable_value(saver: CpstoreSaver) -> None:
    """An unchanged list, dict or message channel is a fresh object in each tuple."""
    _recorded(saver, 9)
    tuples = list(saver.list(_cfg("")))
    newer, older = (t.checkpoint["channel_values"] for t in tuples[-2:])  # steps 1 and 0
    for name in ("doc", "messages"):  # unchanged at step 1
        assert older[name] == newer[name] and older[name] is not newer[name]
    assert newer["text"] is older["text"]  # an immutable value may be shared
    newer["doc"]["k"].append("changed")
    newer["messages"][0].content = "changed"
    assert older["doc"] == {"k": [0]} and older["messages"][0].content == "m0"
