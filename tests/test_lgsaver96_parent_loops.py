"""lgsaver96: LangGraph parent links that loop (a checkpoint re-put under a later parent).

Any saver takes a re-put of a stored id under any parent: the config a put returned, passed
back with the same checkpoint (a retry), names the checkpoint as its own parent; a re-put
of ``A`` under its child ``B`` makes ``A -> B -> A``. InMemorySaver stores both. The walks
along ``parent`` links went round for ever: a ``keep_latest`` prune (in its write txn,
so every writer of the store, in every process, waited behind it),
``get_delta_channel_history`` and ``diff_threads``. Now the history visits each ancestor
once; a diff, which needs a root to align the chains at, refuses the loop
(IntegrityError), and so do a prune whose kept checkpoints loop and a ``copy_thread``
of a looped thread (no order records them again with steps that never go backwards),
before anything is dropped or copied (the copy failed part-way, its target holding the
first checkpoints); a self-loop alone is pruned and copied.

A walk that never ends is caught by counting the lines the saver's code runs (no clock).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, TypeVar

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from pg_cluster import backend_store, pg_cluster  # noqa: F401 - fixtures

from cpstore.errors import IntegrityError
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph.diff import diff_threads
from cpstore.store import Store

T = TypeVar("T")
#: Lines of cpstore/langgraph code one call may run here (a few thousand suffice).
_LINES = 300_000


class _RunawayError(Exception):
    """The saver's code ran more lines than any finite walk of these threads needs."""


def _bounded(fn: Callable[[], T]) -> T:
    """``fn()``, or _RunawayError once the saver's own code has run ``_LINES`` lines."""
    count = [0]

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        if event == "line":
            count[0] += 1
            if count[0] > _LINES:
                raise _RunawayError(f"{frame.f_code.co_name} runs on")
        return local

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        return local if "cpstore/langgraph" in frame.f_code.co_filename else None

    before = sys.gettrace()  # a coverage run's tracer: put back after
    sys.settrace(tracer)
    try:
        return fn()
    finally:
        sys.settrace(before)


def _cp(cid: str, value: int) -> dict[str, Any]:
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["id"] = cid
    cp["channel_values"] = {"a": value}
    # "d" holds no value (a DeltaChannel between snapshots): every walk looks for it
    cp["channel_versions"] = {"a": f"{value:03}", "d": "001"}
    return cp


_META = {"source": "loop", "counters_since_delta_snapshot": {"d": 1}}


def _conf(thread: str, cid: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if cid is not None:
        conf["checkpoint_id"] = cid
    return {"configurable": conf}


@pytest.fixture
def saver(store: Store) -> Iterator[CpstoreSaver]:
    yield CpstoreSaver(store)


def _self_loop(saver: CpstoreSaver, thread: str) -> None:
    """``A`` put, then put again with the config the first put returned (its own id)."""
    done = saver.put(_conf(thread), _cp("A", 1), {**_META, "step": 1}, {"a": "001", "d": "001"})
    saver.put_writes(done, [("d", "w-A")], "task-a")
    assert saver.put(done, _cp("A", 1), {**_META, "step": 1}, {}) == done


def _two_loop(saver: CpstoreSaver, thread: str) -> None:
    """``A``, its child ``B``, then ``A`` re-put under ``B``: ``A -> B -> A``."""
    a = saver.put(_conf(thread), _cp("A", 1), {**_META, "step": 1}, {"a": "001", "d": "001"})
    saver.put_writes(a, [("d", "w-A")], "task-a")
    b = saver.put(a, _cp("B", 2), {**_META, "step": 2}, {"a": "002"})
    saver.put_writes(b, [("d", "w-B")], "task-b")
    saver.put(b, _cp("A", 3), {**_META, "step": 3}, {"a": "003"})


LOOPS = {"self": _self_loop, "two": _two_loop}


def _seen(saver: CpstoreSaver, thread: str) -> list[Any]:
    return [
        (t.config, t.checkpoint, t.metadata, t.parent_config, t.pending_writes)
        for t in saver.list(_conf(thread))
    ]


def _other_thread_commits(saver: CpstoreSaver) -> None:
    """No writer is left waiting behind the prune: a put of another thread reads back."""
    other = saver.put(_conf("other"), _cp("X", 9), {"step": 0}, {"a": "009"})
    got = saver.get_tuple(other)
    assert got is not None and got.checkpoint["channel_values"] == {"a": 9}
    assert saver.store.verify().ok


def test_keep_latest_of_a_self_looped_thread_ends_and_keeps_it(saver: CpstoreSaver) -> None:
    """The prune ends (it ran for ever in its write txn) and ``A`` reads as before."""
    _self_loop(saver, "t")
    before = _seen(saver, "t")
    assert len(before) == 1
    _bounded(lambda: saver.prune(["t"]))
    assert _seen(saver, "t") == before
    _other_thread_commits(saver)


def test_keep_latest_of_a_two_loop_is_refused_before_anything_changes(
    saver: CpstoreSaver,
) -> None:
    """The newest (``B``) needs ``A`` (its delta channel ``d`` holds no value), whose
    parent is ``B``: no order records both again with steps that never go backwards.
    IntegrityError naming the loop, from the prune's txn: every tuple reads as before."""
    _two_loop(saver, "t")
    before = _seen(saver, "t")
    assert [t[0]["configurable"]["checkpoint_id"] for t in before] == ["B", "A"]
    with pytest.raises(IntegrityError, match="parent chain loops"):
        _bounded(lambda: saver.prune(["t"]))
    assert _seen(saver, "t") == before
    _other_thread_commits(saver)


def test_delta_history_on_a_self_loop_reads_the_checkpoint_once(saver: CpstoreSaver) -> None:
    """The target is its own parent: no ancestor but itself, so no write and no seed
    (the walk went round for ever)."""
    _self_loop(saver, "t")
    got = _bounded(lambda: saver.get_delta_channel_history(config=_conf("t"), channels=["d"]))
    assert got == {"d": {"writes": []}}


def test_delta_history_on_a_two_loop_reads_each_ancestor_once(saver: CpstoreSaver) -> None:
    """From ``A`` (newest, parent ``B``): ``B``'s writes once, then ``B``'s parent is the
    target itself and the walk ends; from ``B``: ``A``'s writes once."""
    _two_loop(saver, "t")
    from_a = _bounded(
        lambda: saver.get_delta_channel_history(config=_conf("t", "A"), channels=["d", "a"])
    )
    assert from_a == {"d": {"writes": [("task-b", "d", "w-B")]}, "a": {"writes": [], "seed": 2}}
    from_b = _bounded(
        lambda: saver.get_delta_channel_history(config=_conf("t", "B"), channels=["d"])
    )
    assert from_b == {"d": {"writes": [("task-a", "d", "w-A")]}}


@pytest.mark.parametrize("loop", sorted(LOOPS))
def test_diff_of_a_looped_chain_is_refused_not_walked_for_ever(
    saver: CpstoreSaver, loop: str
) -> None:
    """Against another thread (the whole chain is walked) and against itself (one
    checkpoint: its chain is still read through): IntegrityError naming the loop."""
    LOOPS[loop](saver, "t")
    _two_loop(saver, "u") if loop == "self" else _self_loop(saver, "u")
    for other in (_conf("u"), _conf("t")):

        def diff(other: dict[str, Any] = other) -> Any:
            return diff_threads(saver.store, _conf("t"), other)

        with pytest.raises(IntegrityError, match="parent chain loops"):
            _bounded(diff)


def test_copy_of_a_self_loop_is_whole(saver: CpstoreSaver) -> None:
    """``A`` (its own parent) is copied with its writes, as it reads on the source."""
    _self_loop(saver, "t")
    saver.copy_thread("t", "u")

    def as_read(thread: str) -> list[Any]:
        return [
            (t.checkpoint, t.metadata, t.pending_writes, t.parent_config is None)
            for t in saver.list(_conf(thread))
        ]

    assert as_read("u") == as_read("t")
    assert len(as_read("u")) == 1


def test_copy_of_a_two_loop_is_refused_before_anything_is_copied(saver: CpstoreSaver) -> None:
    """IntegrityError naming the loop; the target holds nothing (it held ``A``, then
    the copy of ``B`` under it failed as a step backwards), the source as before."""
    _two_loop(saver, "t")
    before = _seen(saver, "t")
    with pytest.raises(IntegrityError, match="parent chain loops"):
        _bounded(lambda: saver.copy_thread("t", "u"))
    assert _seen(saver, "u") == []
    assert _seen(saver, "t") == before
    assert saver.store.verify().ok
