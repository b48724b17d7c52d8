"""lgsaver96: ``prune`` of one str, and a None thread id, delete nothing.

``prune(thread_ids, strategy=...)`` took each element through ``str()``: one str is a
``Sequence[str]`` (mypy takes it), so ``prune("ab", strategy="delete")`` deleted threads
``a`` and ``b`` (and kept ``ab``), and ``keep_latest`` dropped their histories; a None
entry, and ``delete_thread(None)`` or ``copy_thread`` with a None id, named the thread
``"None"``. Now each is ``InvalidInputError`` before anything is pruned, deleted or
copied, as ``delete_for_runs`` refuses its run ids (lgfix72); a thread id of another type
is read as a config's is (``str()``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from pg_cluster import backend_store, pg_cluster  # noqa: F401 - fixtures

from cpstore.errors import InvalidInputError
from cpstore.langgraph import CpstoreSaver
from cpstore.store import Store

THREADS = ("a", "b", "ab", "None", "1")


@pytest.fixture
def saver(store: Store) -> Iterator[CpstoreSaver]:
    saver = CpstoreSaver(store)
    for thread in THREADS:  # two checkpoints each: a keep_latest drops one
        config: dict[str, Any] = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        for i in range(2):
            cp: dict[str, Any] = dict(empty_checkpoint())
            cp["id"] = f"id{i}"
            cp["channel_values"], cp["channel_versions"] = {"v": i}, {"v": str(i)}
            config = saver.put(config, cp, {"step": i}, {"v": str(i)})
    yield saver


def _counts(saver: CpstoreSaver) -> dict[str, int]:
    return {t: len(list(saver.list({"configurable": {"thread_id": t}}))) for t in THREADS}


ALL = dict.fromkeys(THREADS, 2)

#: Each call on the saver as ``Any``: the arguments are what the signatures do not allow.
REFUSED: dict[str, Callable[[Any], Any]] = {
    "prune one str, delete": lambda s: s.prune("ab", strategy="delete"),
    "prune one str, keep_latest": lambda s: s.prune("ab"),
    "prune bytes": lambda s: s.prune(b"ab", strategy="delete"),
    "prune not iterable": lambda s: s.prune(5, strategy="delete"),
    "prune a None after a good id": lambda s: s.prune(["a", None], strategy="delete"),
    "prune a None, keep_latest": lambda s: s.prune(["a", None]),
    "prune a bytes id": lambda s: s.prune([b"a"], strategy="delete"),
    "delete_thread None": lambda s: s.delete_thread(None),
    "copy_thread from None": lambda s: s.copy_thread(None, "x"),
    "copy_thread to None": lambda s: s.copy_thread("a", None),
    "aprune one str": lambda s: asyncio.run(s.aprune("ab", strategy="delete")),
    "adelete_thread None": lambda s: asyncio.run(s.adelete_thread(None)),
}


@pytest.mark.parametrize("call", sorted(REFUSED))
def test_a_thread_ids_argument_that_names_no_threads_is_refused(
    saver: CpstoreSaver, call: str
) -> None:
    """InvalidInputError, and every thread holds both its checkpoints (none copied)."""
    assert _counts(saver) == ALL
    with pytest.raises(InvalidInputError):
        REFUSED[call](saver)
    assert _counts(saver) == ALL
    assert saver.get_tuple({"configurable": {"thread_id": "x"}}) is None


def test_sequences_of_ids_prune_exactly_those_threads(saver: CpstoreSaver) -> None:
    """A tuple, a generator and an int id (read as a config's ``thread_id`` is: "1")."""
    loose: Any = saver  # a generator and an int are not what the signature says
    loose.prune(("a",), strategy="delete")
    loose.prune(t for t in ["b"])
    loose.prune([1], strategy="delete")
    assert _counts(saver) == {"a": 0, "b": 1, "ab": 2, "None": 2, "1": 0}
    saver.delete_thread("None")  # the str is a thread like any other
    assert _counts(saver)["None"] == 0
    assert saver.store.verify().ok
