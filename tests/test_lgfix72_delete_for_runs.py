"""``delete_for_runs`` matches run ids as they were put, and refuses what is no run id.

Before lgfix72 the saver passed every entry of ``run_ids`` through ``str()`` and the
index kept a metadata ``run_id`` only when it was a str, so:

* ``delete_for_runs("r1")`` (one id, not a list) deleted the runs ``"r"`` and ``"1"``;
  ``[None]`` deleted a run named ``"None"``; ``[5]`` or ``[b"r1"]`` matched nothing,
  silently. Now each is ``InvalidInputError`` naming the entry, nothing deleted.
* a checkpoint whose metadata ``run_id`` is a ``uuid.UUID`` (LangGraph's own run ids
  are UUIDs; ``str(run_id)`` is the form it writes) was never deleted, by the UUID or by
  its str. Now the index keeps its canonical str.
* a run id holding NUL: ``get_checkpoint_metadata`` takes NUL out of the metadata at
  put, so the id as the caller knows it matched nothing. Now the same is taken out of
  ``run_ids``.

A metadata ``run_id`` that is an int, float or bool (``get_checkpoint_metadata`` copies
those from the config's metadata) is no str run id: ``delete_for_runs(["5"])`` does not
match ``5``, as InMemorySaver's metadata filter ``{"run_id": "5"}`` does not list it.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from pg_cluster import backend_store, pg_cluster  # noqa: F401 - fixtures

from cpstore.errors import InvalidInputError
from cpstore.langgraph import CpstoreSaver
from cpstore.store import Store


def _put(saver: Any, thread: str, run_id: Any, *, in_config: bool = False) -> None:
    """One root checkpoint of ``thread`` whose metadata ``run_id`` is ``run_id`` (put in
    the metadata itself, or in the config's metadata as LangGraph's loop passes it)."""
    config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    metadata: dict[str, Any] = {"source": "input", "step": -1}
    if in_config:
        config["metadata"] = {"run_id": run_id}
    else:
        metadata["run_id"] = run_id
    saver.put(config, empty_checkpoint(), metadata, {})


def _threads(saver: Any) -> set[str]:
    return {t.config["configurable"]["thread_id"] for t in saver.list(None)}


@pytest.mark.parametrize(
    ("run_ids", "where"),
    [
        ("r1", None),  # one id: a str is a sequence of one-character ids
        (b"r1", None),
        (5, None),  # not iterable
        (["r1", 5], "run_ids[1]"),
        ([None], "run_ids[0]"),
        (["r1", b"r1"], "run_ids[1]"),
        (("r1", 1.5), "run_ids[1]"),
        (iter, "run_ids[1]"),  # a generator: made per test, below
    ],
)
def test_what_is_no_run_id_is_refused_and_nothing_is_deleted(
    store: Store, run_ids: Any, where: str | None
) -> None:
    saver = CpstoreSaver(store)
    for thread, run_id in (("a", "r"), ("b", "1"), ("c", "r1"), ("d", "None"), ("e", "5")):
        _put(saver, thread, run_id)
    if run_ids is iter:
        run_ids = (r for r in ["r1", None])
    with pytest.raises(InvalidInputError) as refused:
        saver.delete_for_runs(run_ids)
    assert refused.value.where == where
    assert refused.value.got
    assert _threads(saver) == {"a", "b", "c", "d", "e"}


def test_the_async_twin_refuses_alike(store: Store) -> None:
    saver = CpstoreSaver(store)
    _put(saver, "a", "r")
    with pytest.raises(InvalidInputError) as refused:
        asyncio.run(saver.adelete_for_runs(["r", None]))  # type: ignore[list-item]
    assert refused.value.where == "run_ids[1]"
    assert _threads(saver) == {"a"}
    asyncio.run(saver.adelete_for_runs(["r"]))
    assert _threads(saver) == set()


def test_a_uuid_run_id_is_deleted_by_the_uuid_or_its_str(store: Store) -> None:
    saver = CpstoreSaver(store)
    one, two, three = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    _put(saver, "by-uuid", one)
    _put(saver, "by-str", two)
    _put(saver, "stored-str", str(three))
    _put(saver, "other", str(uuid.uuid4()))
    saver.delete_for_runs([one])
    assert _threads(saver) == {"by-str", "stored-str", "other"}
    saver.delete_for_runs([str(two)])
    assert _threads(saver) == {"stored-str", "other"}
    saver.delete_for_runs([three])  # a UUID matches the str form LangGraph writes
    assert _threads(saver) == {"other"}


def test_a_run_id_holding_nul_is_deleted_by_the_id_the_caller_put(store: Store) -> None:
    saver = CpstoreSaver(store)
    _put(saver, "a", "run\x00one", in_config=True)
    _put(saver, "b", "run\x00two")
    saver.delete_for_runs(["run\x00one", "run\x00two"])
    assert _threads(saver) == set()


def test_a_number_run_id_is_matched_by_no_str_as_in_memory_saver_s_filter(
    store: Store,
) -> None:
    saver, memory = CpstoreSaver(store), InMemorySaver()
    for s in (saver, memory):
        _put(s, "num", 5, in_config=True)
        _put(s, "str", "5", in_config=True)
    # InMemorySaver's own matching of a metadata run_id (its filter is equality)
    assert {
        t.config["configurable"]["thread_id"] for t in memory.list(None, filter={"run_id": "5"})
    } == {"str"}
    saver.delete_for_runs(["5"])
    assert _threads(saver) == {"num"}
    with pytest.raises(InvalidInputError):
        saver.delete_for_runs([5])  # type: ignore[list-item]
    saver.delete_thread("num")
    assert _threads(saver) == set()
