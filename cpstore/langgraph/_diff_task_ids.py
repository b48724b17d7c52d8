"""Whether the task ids of the two last checkpoints' pending writes are LangGraph's (lgdiff83).

A resume hands a pending write back to the task it prepares by the write's task id
(``_loop``: ``checkpoint_pending_writes`` matched to ``self.tasks``); a write under an
id the resume does not derive is not applied, and its task runs again (a tool call
repeated). ``diff_threads`` compares writes without their ids, which LangGraph derives
from the checkpoint id (with the namespace, the step, the node and its triggers), so
they differ between threads; it cannot derive them itself (a node's triggers are the
graph's). Two threads of equal writes, one put with the finished task's writes under
another id, were "same values at all 2 checkpoints" while only that thread's resume
ran the task again (``tests/test_lgdiff83_task_ids.py``).

What is checked, without the graph: the ids of the writes of one task path on the two
sides. Last checkpoints of one id (and namespace) derive the same ids: they must be
equal. Of other ids they derive other ids (a 128-bit hash of the checkpoint id): an id
on both sides means a write copied from another checkpoint, which a resume of at least
one side does not hand back. Either is undecidable (which side's task runs again is
not known without the graph); the null task's writes (input, ``Command``), whose id is
fixed, are left out.
"""

from __future__ import annotations

from collections import defaultdict

from cpstore.langgraph._diff_chain import node_of
from cpstore.langgraph._read import Entry, StoredWrite

__all__ = ["task_id_divergence"]

#: The task id LangGraph stores input and ``Command(update=...)`` writes under.
_NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"


def _by_path(writes: list[StoredWrite]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for w in writes:
        if w.task_id != _NULL_TASK_ID:
            out[w.task_path].add(w.task_id)
    return out


def task_id_divergence(
    last: tuple[Entry, Entry], writes: tuple[list[StoredWrite], list[StoredWrite]]
) -> tuple[tuple[str, ...], tuple[str, ...], bool, str] | None:
    """``(nodes, channels, True, why)`` when the task ids of the last checkpoints' writes
    (equal but for their ids) are not what LangGraph derives on both sides, else None."""
    one = (last[0].ns, last[0].checkpoint_id) == (last[1].ns, last[1].checkpoint_id)
    ia, ib = _by_path(writes[0]), _by_path(writes[1])
    odd = sorted(p for p in ia.keys() & ib.keys() if (ia[p] != ib[p] if one else ia[p] & ib[p]))
    if not odd:
        return None
    chosen = [w for w in writes[0] + writes[1] if w.task_path in odd]
    nodes = tuple(sorted({node_of(w) for w in chosen}))
    channels = tuple(sorted({w.channel for w in chosen}))
    why = (
        "the task ids of the pending writes of node "
        + ", ".join(nodes)
        + (
            " differ, where one checkpoint id derives one id"
            if one
            else " are the same on both sides, where other checkpoint ids derive other ids"
        )
        + ": a resume hands a write back to its task by id, so the task may run again on "
        "one side only (the ids are derived from the graph's triggers, not compared)"
    )
    return nodes, channels, True, why
