"""The positions ``diff_threads`` compares: where two chains start, and who wrote one.

A chain is walked back from its newest checkpoint along ``parent`` links, and stops at
the first checkpoint retention pruned (``saver.prune``, keep_latest): a pruned thread's
chain starts at a later step than its root. Compared position by position from their
start, a pruned chain's newest checkpoint met the other's root (review80: "diverge at
step 2 (checkpoint 0 of each chain): node (input) wrote different __start__, log",
where the threads differed in what node ``b`` wrote at step 2). :func:`aligned`
starts both chains at the newest first step either keeps; :func:`nodes_at` names the
node(s) whose writes at the parent made a position, ``(pruned)`` when those are gone.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, TypeVar

from cpstore.errors import InvalidInputError
from cpstore.langgraph._diff_sealed import Undecidable, metadata_of
from cpstore.langgraph._diff_triggers import head_of
from cpstore.langgraph._read import (
    Entry,
    StoredWrite,
    entry_at,
    parent_loop,
    stored,
    stored_writes,
    view_head,
)
from cpstore.store import Store
from cpstore.store.backend import Txn
from cpstore.store.reader import CheckpointView

__all__ = [
    "aligned",
    "node_of",
    "nodes",
    "nodes_at",
    "one_checkpoint",
    "parent_nodes",
    "side",
]


class _Position(Protocol):
    @property
    def entry(self) -> Entry: ...

    @property
    def step(self) -> int | None: ...


P = TypeVar("P", bound=_Position)

#: How the task path of a node's (pull) task starts; the node's name follows.
_PULL_PATH = "~__pregel_pull, "


def node_of(w: StoredWrite) -> str:
    """The name to report a write's task by: a pull task's node (its path's last part);
    a push task's (a ``Send``, a functional call) path holds only indices, so the whole
    path (review77: two Sends' differing writes were both "node 0000000000"); the task
    id when the path is empty."""
    if w.task_path.startswith(_PULL_PATH):
        return w.task_path[len(_PULL_PATH) :]
    return w.task_path.strip() or w.task_id


def nodes(
    txn: Txn[memoryview], store: Store, parent: Entry | None, channels: set[str]
) -> list[str]:
    """Nodes whose writes at ``parent`` touched ``channels`` (task path ``..., node``)."""
    if parent is None:
        return ["(input)"]
    found: set[str] = set()
    meta = store.backend.db("meta")
    for w in stored_writes(txn, meta, parent.thread_id, parent.ns, parent.checkpoint_id):
        if w.channel in channels or not channels:
            found.add(node_of(w))
    return sorted(found) or ["(update_state or input)"]


def _first_step(chain: Sequence[_Position]) -> int | None:
    """The step a chain cut by a prune starts at (its first checkpoint has a parent),
    or None: it starts at its root, or its step is unknown."""
    if not chain or chain[0].entry.parent is None or type(chain[0].step) is not int:
        return None
    return chain[0].step


def _cut(a: list[P], b: list[P]) -> tuple[list[P], list[P], str]:
    """Both chains from the newest first step either keeps when a prune cut one, and
    the note the summary ends with (empty when neither was cut, or when a side would
    be left empty: then compared as they are)."""
    cut = [s for s in (_first_step(a), _first_step(b)) if s is not None]
    if not cut:
        return a, b, ""
    start = max(cut)

    def skip(chain: list[P]) -> list[P]:
        k = 0
        for k, p in enumerate(chain):  # noqa: B007 - k is where the kept part starts
            step = p.step
            if not isinstance(step, int) or step >= start:
                break
        else:
            k = len(chain)
        return chain[k:]

    ta, tb = skip(a), skip(b)
    if not ta or not tb:
        return a, b, ""
    sides = " and ".join(
        n for n, s in (("A", _first_step(a)), ("B", _first_step(b))) if s is not None
    )
    return ta, tb, f" (compared from step {start}: older checkpoints of {sides} were pruned)"


def _steps(chain: Sequence[_Position]) -> list[int] | None:
    """The chain's steps when each is an int and they only increase, else None."""
    out: list[int] = []
    for p in chain:
        step = p.step
        if type(step) is not int or (out and step <= out[-1]):
            return None
        out.append(step)
    return out


def _unrecorded(a: list[P], b: list[P]) -> tuple[list[P], list[P], str]:
    """Both chains at the steps both recorded, up to the last step both reach (what
    follows on one side stays: it goes on), and the note; as they are when the steps
    match, or are not increasing ints, or none is shared. ``durability="exit"``
    records a run's last checkpoint only (a root at step 2): compared position by
    position with the other's root, it "diverged at step -1" (review80). Chains of one
    length whose steps differ only at the last are compared as they are, the last
    checkpoints with each other (lgleft86): ``as_node="__copy__"`` stores its copy
    beside the original (same parent) at the original's step plus one, and a resume
    reads only the last checkpoint (its values, versions, pending writes, subgraphs:
    all compared), so the copy and its original "only B goes on" while both resumes
    ran the same nodes to the same state. Equal there, they are undecidable, not the
    same (review86, ``diff._other_steps``: a node reading its step resumes otherwise)."""
    sa, sb = _steps(a), _steps(b)
    if sa is None or sb is None or sa == sb or not sa or not sb or not set(sa) & set(sb):
        return a, b, ""
    if len(sa) == len(sb) >= 2 and sa[:-1] == sb[:-1]:
        return a, b, f" (the last checkpoints are step {sa[-1]} on A and {sb[-1]} on B)"
    last, both = min(sa[-1], sb[-1]), set(sa) & set(sb)
    only = [
        (name, [s for s in steps if s not in both and s <= last])
        for name, steps in (("A", sa), ("B", sb))
    ]
    said = "; ".join(f"steps {', '.join(map(str, s))} recorded on {n} only" for n, s in only if s)
    if not said:
        return a, b, ""  # one chain goes on past the other's last step: as they are
    ka = [p for p, s in zip(a, sa, strict=True) if s in both or s > last]
    kb = [p for p, s in zip(b, sb, strict=True) if s in both or s > last]
    return ka, kb, f" (compared at the steps both recorded: {said})"


def aligned(a: list[P], b: list[P]) -> tuple[list[P], list[P], str]:
    """Both chains as they are compared, and the note the summary ends with: from the
    newest first step either keeps when a prune cut one (review80: a pruned thread's
    step 2 met the other's root), then at the steps both recorded."""
    a, b, cut = _cut(a, b)
    a, b, gaps = _unrecorded(a, b)
    return a, b, cut + gaps


def parent_nodes(
    txn: Txn[memoryview], store: Store, points: Sequence[Any], channels: set[str]
) -> list[str]:
    """The nodes whose writes at its parent made each of ``points`` (one per side; each
    distinct parent read once): a root's ``(input)``; nothing from a root past step -1
    (a run that did not record its earlier steps) or from a parent retention pruned,
    ``(pruned)`` when no side names any."""
    meta = store.backend.db("meta")
    known: set[str] = set()
    done: set[bytes] = set()
    for p in points:
        e = p.entry
        if e.parent is None:
            if type(p.step) is not int or p.step <= -1:
                known |= set(nodes(txn, store, None, channels))
            continue
        parent = entry_at(txn, meta, e.thread_id, e.ns, e.parent)
        if parent is not None and parent.cid not in done:
            done.add(parent.cid)
            known |= set(nodes(txn, store, parent, channels))
    return sorted(known) or ["(pruned)"]


def nodes_at(
    txn: Txn[memoryview], store: Store, pair: tuple[Sequence[Any], Sequence[Any]], i: int,
    channels: set[str],
) -> list[str]:  # fmt: skip
    """The nodes whose writes at each side's parent made position ``i`` of both chains
    (:func:`parent_nodes`)."""
    return parent_nodes(txn, store, (pair[0][i], pair[1][i]), channels)


def side(config: Mapping[str, Any]) -> tuple[str, str, str | None]:
    """``(thread_id, checkpoint_ns, checkpoint_id or None)`` of a side's config."""
    conf = config.get("configurable") if isinstance(config, Mapping) else None
    if not isinstance(conf, Mapping) or conf.get("thread_id") is None:
        raise InvalidInputError("each side needs configurable.thread_id", got=repr(config)[:80])
    cid = conf.get("checkpoint_id")
    return str(conf["thread_id"]), str(conf.get("checkpoint_ns") or ""), str(cid) if cid else None


def one_checkpoint(
    txn: Txn[memoryview],
    store: Store,
    serde: Any,
    configs: tuple[Mapping[str, Any], Mapping[str, Any]],
) -> int | None:
    """The length of the chain both sides name when they name one checkpoint of one
    thread and namespace (the newest, or the same id), else None: one chain, one set of
    pending writes and of subgraphs, whose resumes are one resume (review80: sealed,
    without the saver's serde, it was undecidable, the metadata not decoding). Every
    checkpoint of the chain is still read, hash-checked, its head's framing checked and
    both halves decoded where the serde can (damage is refused)."""
    (ta, na, ia), (tb, nb, ib) = side(configs[0]), side(configs[1])
    meta = store.backend.db("meta")
    entry = entry_at(txn, meta, ta, na, ia)
    if (ta, na) != (tb, nb) or entry is None or ib not in (None, entry.checkpoint_id):
        return None
    if not stored(txn, store, entry):
        return None  # pruned: the diff's chain says so
    if ib is None and ia is not None and entry_at(txn, meta, tb, nb, None) != entry:
        return None  # B is the newest, A an older checkpoint
    n = 0
    at: Entry | None = entry
    seen: set[str] = set()
    while at is not None and stored(txn, store, at):
        if at.checkpoint_id in seen:
            raise parent_loop(at)  # as the diff's walk (diff._chain)
        seen.add(at.checkpoint_id)
        n += 1
        with CheckpointView(store.backend, at.cid, verify=True, txn=txn) as view:
            md = view_head(view, at)[1]  # its framing checked
        try:  # and each half decoded, unless sealed beyond the serde: one byte is one byte
            metadata_of(serde, md, f"checkpoint {at.cid.hex()}")
            head_of(txn, store, serde, at)
        except Undecidable:
            pass
        at = None if at.parent is None else entry_at(txn, meta, at.thread_id, at.ns, at.parent)
    return n
