"""Whether the ``updated_channels`` of the two last checkpoints make resumes differ (lgdiff83).

LangGraph's loop stores in each checkpoint the channels its step updated
(``Checkpoint["updated_channels"]``), and a resume takes as candidates only the nodes
those channels trigger (``prepare_next_tasks``: ``trigger_to_nodes``); ``None`` or an
empty list makes every node a candidate (``update_state``, ``__copy__`` and fork
checkpoints store ``None``). A candidate runs when one of its triggers is newer than it
saw (compared by ``_diff_triggers``). Two last checkpoints of equal values, versions
seen and pending writes whose ``updated_channels`` differ resume alike when each set is
the one LangGraph's loop writes, what its checkpoint's step moved: a node made fresh by
an older update was a candidate at the step after that update, and ran (the earlier
checkpoints' sets are taken to be the loop's). Else they may not: a checkpoint put with
``updated_channels`` that leave out the ``branch:to:n`` its step wrote resumes without
running ``n`` (``tests/test_lgdiff83_updated_channels.py``); ``diff_threads`` said "same
values at all 3 checkpoints".

What is compared: the two sets (``None`` and ``[]`` alike: every node), each with the
channels its checkpoint's own null-task writes name (``Command(update=..., goto=...)``:
a resume adds what they update to a set). When they differ, a node either side's
``versions_seen`` names (its triggers: the channels it saw) that is fresh and a
candidate on one side only is a divergence; otherwise a set that leaves out a channel
its step moved (an available channel whose version differs from the parent
checkpoint's; not a DeltaChannel, whose snapshot moves its version beside the step, nor
a channel the parent's null-task writes moved, which the resume that made the step
added to its set; but a DeltaChannel the step's tasks wrote, the parent's writes under
a task id: review84, a set leaving one out resumed without the node subscribed to it
while the diff said same), or names one it did not move (nor a DeltaChannel), makes it
undecidable: a node that has not run yet may be triggered by it on one side only. Sets
that are the loop's are the same (a node that appended ``[]`` to a list moved its
version: its set names it, the other thread's not).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from cpstore.langgraph._diff_sealed import Undecidable, metadata_of
from cpstore.langgraph._diff_task_ids import PUSH_PATH, targets, task_id_divergence
from cpstore.langgraph._diff_triggers import head_of
from cpstore.langgraph._read import (
    Entry,
    StoredWrite,
    entry_at,
    stored,
    stored_writes,
    view_head,
)
from cpstore.store import Store
from cpstore.store.backend import Txn
from cpstore.store.reader import CheckpointView

__all__ = ["UpdatedDivergence", "resume_divergence", "updated_divergence"]

#: ``versions_seen``'s key for the versions seen at the last interrupt (not a node).
_INTERRUPT = "__interrupt__"
#: LangGraph's channel of pending ``Send``s: stored empty (``[]``) once consumed, and run
#: as push tasks whatever the set (it triggers no node).
_TASKS = "__pregel_tasks"
#: The task id LangGraph stores input and ``Command(update=...)`` writes under.
_NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"

#: ``(nodes, channels, undecidable, why)``: what differs and the summary's words.
UpdatedDivergence = tuple[tuple[str, ...], tuple[str, ...], bool, str]


def _updated(head: Mapping[str, Any], where: str) -> frozenset[str] | None:
    """A head's ``updated_channels`` as a resume reads it: None (every node a candidate)
    when absent or empty, else the set of its names."""
    got = head.get("updated_channels")
    if not got:
        return None
    if not isinstance(got, (list, tuple, set, frozenset)) or not all(type(c) is str for c in got):
        raise Undecidable(
            f"the updated_channels of {where} are not a list of channel names "
            f"({type(got).__name__}): which nodes a resume runs is unknown"
        )
    return frozenset(got)


def _newer(version: Any, seen: Any) -> bool:
    """LangGraph's ``version > seen`` (a seen version of another type: newer)."""
    try:
        return bool(version > seen)
    except TypeError:
        return True


def _seen(head: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    seen = head.get("versions_seen")
    if not isinstance(seen, Mapping):
        return {}
    return {
        n: (s if isinstance(s, Mapping) else {})
        for n, s in seen.items()
        if type(n) is str and n != _INTERRUPT
    }


def _fresh(head: Mapping[str, Any], node: str, triggers: frozenset[str], held: set[str]) -> bool:
    """Whether one of the node's ``triggers`` holds a value newer than it saw."""
    versions = head.get("channel_versions") or {}
    seen = _seen(head).get(node, {})
    null = type(next(iter(versions.values()), ""))()
    return any(
        c in held and c in versions and _newer(versions[c], seen.get(c, null)) for c in triggers
    )


def _known(
    heads: tuple[Mapping[str, Any], Mapping[str, Any]],
    sets: tuple[frozenset[str] | None, frozenset[str] | None],
    held: tuple[set[str], set[str]],
) -> tuple[set[str], set[str]]:
    """The nodes either side's ``versions_seen`` names that a resume runs on one side
    only (fresh, and a candidate on one side), and the channels of the sets that make it."""
    sa, sb = _seen(heads[0]), _seen(heads[1])
    nodes: set[str] = set()
    channels: set[str] = set()
    for node in sorted(set(sa) | set(sb)):
        triggers = frozenset(sa.get(node, {})) | frozenset(sb.get(node, {}))
        runs = [
            _fresh(h, node, triggers, k) and (s is None or bool(triggers & s))
            for h, s, k in zip(heads, sets, held, strict=True)
        ]
        if runs[0] != runs[1]:
            nodes.add(node)
            on = sets[0] if runs[0] else sets[1]
            channels |= triggers & on if on is not None else triggers
    return nodes, channels


def _step(txn: Txn[memoryview], store: Store, serde: Any, entry: Entry) -> Any:
    """``metadata["step"]`` of ``entry``'s checkpoint."""
    with CheckpointView(store.backend, entry.cid, verify=True, txn=txn) as view:
        part = view_head(view, entry)[1]
    return metadata_of(serde, part, f"checkpoint {entry.cid.hex()}").get("step")


def _moved(
    txn: Txn[memoryview],
    store: Store,
    serde: Any,
    at: tuple[Entry, Mapping[str, Any]],
    skip: tuple[set[str], frozenset[str]],
) -> tuple[set[str], set[str]] | str:
    """``(must, may)``: the available channels (``skip[0]``: those holding a value) whose
    version moved since the parent checkpoint, less the DeltaChannels (``skip[1]``),
    those the parent's null-task writes moved and ``__pregel_tasks``, plus the
    DeltaChannels the parent's task writes (the step's) wrote (a set LangGraph's loop
    writes names them all), and the channels such a set may name (those moved, the
    DeltaChannels). Why it cannot be told when the parent is pruned or gone, or steps
    between them were not recorded (``durability="exit"``)."""
    (entry, head), (held, delta) = at, skip
    versions = head.get("channel_versions") or {}
    before: Mapping[str, Any] = {}
    nulls: set[str] = set()
    tasks: set[str] = set()  # the DeltaChannels the step's tasks wrote (review84)
    if entry.parent is None:
        step = _step(txn, store, serde, entry)
        if type(step) is int and step > -1:  # the loop's first checkpoint is input, step -1
            return f"it is a root at step {step}: the steps before were not recorded"
    else:
        meta = store.backend.db("meta")
        parent = entry_at(txn, meta, entry.thread_id, entry.ns, entry.parent)
        if parent is None or not stored(txn, store, parent):
            return "its parent is pruned"
        steps = _step(txn, store, serde, entry), _step(txn, store, serde, parent)
        if all(type(s) is int for s in steps) and steps[0] != steps[1] + 1:
            return f"its parent is step {steps[1]}: the steps between were not recorded"
        before = head_of(txn, store, serde, parent).get("channel_versions") or {}
        writes = stored_writes(txn, meta, parent.thread_id, parent.ns, parent.checkpoint_id)
        nulls = {w.channel for w in writes if w.task_id == _NULL_TASK_ID}
        tasks = {w.channel for w in writes if w.task_id != _NULL_TASK_ID and w.channel in delta}
    moved = {c for c, v in versions.items() if before.get(c) != v}
    skipped = delta | nulls | {_TASKS}
    return {c for c in moved if c in held and c not in skipped} | tasks, moved | delta


def _unlike(
    name: str, got: tuple[set[str], set[str]] | str, sets: tuple[frozenset[str], frozenset[str]]
) -> tuple[str, set[str]] | None:
    """Why side ``name``'s set is not the one LangGraph's loop writes, and the channels
    that make it so, or None when it is. ``got``: :func:`_moved`; ``sets``: the set as
    stored, and with its checkpoint's null-task writes (what a resume reads)."""
    if isinstance(got, str):
        return f"{name}'s cannot be checked ({got})", set()
    (must, may), (stored_set, read) = got, sets
    leave, extra = must - read, stored_set - may
    said = [
        f"{name}'s {verb} {', '.join(sorted(chs))}, which its step {moved}"
        for verb, chs, moved in (("leave out", leave, "moved"), ("name", extra, "did not move"))
        if chs
    ]
    return ("; ".join(said), leave | extra) if said else None


def updated_divergence(
    txn: Txn[memoryview],
    store: Store,
    serde: Any,
    last: tuple[Entry, Entry],
    available: tuple[Iterable[str], Iterable[str]],
    *,
    delta: frozenset[str],
) -> UpdatedDivergence | None:
    """How the ``updated_channels`` of the two last checkpoints (``available``: the
    channels each holds a value for; ``delta``: the DeltaChannels) make their resumes
    differ, or None when they do not."""
    heads = tuple(head_of(txn, store, serde, e) for e in last)
    ha, hb = heads[0], heads[1]
    if ha.get("updated_channels") == hb.get("updated_channels"):
        return None  # one value, read alike (whatever it holds)
    wheres = [f"checkpoint {e.cid.hex()}" for e in last]
    stored_sets = (_updated(ha, wheres[0]), _updated(hb, wheres[1]))
    if stored_sets[0] == stored_sets[1]:
        return None
    # a resume adds what its null-task writes (Command(update=..., goto=...)) update to a set
    meta = store.backend.db("meta")
    nulls = [
        {w.channel for w in stored_writes(txn, meta, *e[:3]) if w.task_id == _NULL_TASK_ID}
        for e in last
    ]
    sets = (
        None if stored_sets[0] is None else stored_sets[0] | nulls[0],
        None if stored_sets[1] is None else stored_sets[1] | nulls[1],
    )
    if sets[0] == sets[1]:
        return None
    held = (set(available[0]), set(available[1]))
    nodes, channels = _known((ha, hb), sets, held)
    shown = ", ".join(
        f"{n}: {'all' if s is None else '[' + ', '.join(sorted(s)) + ']'}"
        for n, s in zip("AB", stored_sets, strict=True)
    )
    if nodes:
        why = (
            f"their updated_channels differ ({shown}), which a resume picks its candidate "
            f"nodes by: node {', '.join(sorted(nodes))} runs on one side only"
        )
        return tuple(sorted(nodes)), tuple(sorted(channels)), False, why
    said: list[str] = []
    missing: set[str] = set()
    for name, e, h, read, k, as_stored in zip(
        "AB", last, heads, sets, held, stored_sets, strict=True
    ):
        if read is None or as_stored is None:
            continue
        got = _moved(txn, store, serde, (e, h), (k, delta))
        unlike = _unlike(name, got, (as_stored, read))
        if unlike is not None:
            said.append(unlike[0])
            missing |= unlike[1]
    if not said:
        return None  # each is the set its step wrote: every node a resume may run is a candidate
    why = (
        f"their updated_channels differ ({shown}), which a resume picks its candidate nodes "
        f"by, and {'; '.join(said)}: a node not run yet that those trigger may run on one "
        "side only"
    )
    return (), tuple(sorted(missing)), True, why


def resume_divergence(
    txn: Txn[memoryview],
    store: Store,
    serde: Any,
    last: tuple[Entry, Entry],
    available: tuple[Iterable[str], Iterable[str]],
    *,
    delta: frozenset[str],
    writes: tuple[list[StoredWrite], list[StoredWrite]],
) -> UpdatedDivergence | None:
    """:func:`updated_divergence` and
    :func:`~cpstore.langgraph._diff_task_ids.task_id_divergence` of the two last
    checkpoints (``writes``: their pending writes, equal but for their task ids): a
    divergence first, then a doubt, or None."""
    # the Sends are loaded (every part of the checkpoint read) only for a Send's writes
    push = any(w.task_path.startswith(PUSH_PATH) for w in writes[0] + writes[1])
    sides = tuple(
        (
            e,
            head_of(txn, store, serde, e),
            _step(txn, store, serde, e),
            targets(txn, store, serde, e) if push else (),
        )
        for e in last
    )
    found = [
        f
        for f in (
            updated_divergence(txn, store, serde, last, available, delta=delta),
            task_id_divergence((sides[0], sides[1]), writes),
        )
        if f is not None
    ]
    return min(found, key=lambda f: f[2]) if found else None
