"""Subgraphs interrupted mid-run under the two last checkpoints ``diff_threads`` compares.

A subgraph run from a checkpoint and not finished there keeps its own checkpoints (and
pending writes) in the namespace ``node:<task id>`` one level under it, which a resume
goes on from (review77). The task id differs between threads (LangGraph derives it
from the checkpoint id), so the subgraphs of the two sides are paired by the task path
of the task running each (its interrupt write), else by its ``Send`` index recovered
from the task id (:func:`_send_indices`), else by its node name. Subgraphs of one side
sharing a key are compared as a group (:func:`_group_diff`): before lgsub80 they were
skipped, and threads whose two ``Send``s to a subgraph stopped by ``interrupt_before``
(no write to the parent) with other values were "same values" while their resumes
differed (``tests/test_lgsub80_diff_shared_path.py``). A subgraph compiled with
``checkpointer=True`` keeps one history per thread in a namespace without task ids
(``sub``): it is compared at its newest checkpoint by the time of the parent's, mid-run
or finished (its state is memory the next run reads; review80: it was skipped).
"""

from __future__ import annotations

import binascii
import hashlib
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from xxhash import xxh3_128_hexdigest

from cpstore.langgraph._diff_sealed import metadata_of
from cpstore.langgraph._read import (
    Entry,
    StoredWrite,
    entry_at,
    stored,
    stored_writes,
    thread_entries,
    view_head,
)
from cpstore.store import Store
from cpstore.store.backend import Txn
from cpstore.store.reader import CheckpointView

__all__ = [
    "SEND_TRIES",
    "Found",
    "mid_run_below",
    "one_scan",
    "subgraph_divergence",
    "subgraph_tasks",
]

#: LangGraph's channel for the interrupts a task raised (``langgraph.types.interrupt``).
_INTERRUPT = "__interrupt__"

#: The channels a task that did not finish writes (an interrupt, an error, the resume
#: values it consumed): its subgraph is mid-run, and its checkpoints are what a resume
#: goes on from.
_UNFINISHED = frozenset({_INTERRUPT, "__error__", "__error_source_node__", "__resume__"})

#: LangGraph's separator of namespace levels, and of a level's node name and task id.
_NS_SEP, _NS_END = "|", ":"

#: The ``Send`` indices tried when recovering a subgraph's index from its task id (a
#: fan-out of more Sends leaves the ones above unpaired: compared as a group).
SEND_TRIES = 10_000

#: LangGraph's trigger of a push task (a ``Send``): ``langgraph._internal._constants.PUSH``.
_PUSH = "__pregel_push"

#: ``diff(txn, store, config_a, config_b, serde)``: ``diff._diff`` (a ThreadDiff).
Compare = Callable[[Txn[memoryview], Store, Mapping[str, Any], Mapping[str, Any], Any], Any]


@dataclass(frozen=True, slots=True)
class Found:
    """A subgraph divergence: what to say, the nodes and channels, whether decided."""

    said: str
    nodes: tuple[str, ...]
    channels: tuple[str, ...]
    undecidable: bool = False
    #: The side (0 for A, 1 for B) a subgraph is mid-run (or kept) on, the other
    #: holding none of it; None for any other divergence.
    only: int | None = None


#: Each thread's entries by namespace, read once per diff (:func:`one_scan`): lgleft88
#: measured ``mid_run_below`` and ``_subgraphs`` scanning the whole thread again for
#: every subgraph found (a named side against an unnamed one with 8
#: ``checkpointer=True`` subgraphs on 786 checkpoints: 52 scans, 20,436 entries decoded).
_SCANNED: ContextVar[dict[str, dict[str, list[Entry]]] | None] = ContextVar(
    "cpstore_lg_diff_scanned", default=None
)


@contextmanager
def one_scan() -> Iterator[None]:
    """Within it, each thread's index entries are scanned once (the caller holds one
    read txn across it: the entries cannot change)."""
    token = _SCANNED.set({})
    try:
        yield
    finally:
        _SCANNED.reset(token)


def _by_ns(txn: Txn[memoryview], store: Store, thread_id: str) -> dict[str, list[Entry]]:
    """The thread's entries by namespace (scanned once within :func:`one_scan`)."""
    held = _SCANNED.get()
    if held is not None and thread_id in held:
        return held[thread_id]
    out: dict[str, list[Entry]] = {}
    for e in thread_entries(txn, store.backend.db("meta"), [thread_id]):
        out.setdefault(e.ns, []).append(e)
    if held is not None:
        held[thread_id] = out
    return out


def subgraph_tasks(txn: Txn[memoryview], store: Store, entry: Entry) -> set[str]:
    """The ids of the tasks that ran a subgraph with checkpoints of its own one level
    under ``entry``'s namespace (``node:<task id>``; a ``checkpointer=True`` one's,
    holding no task id, is not attributed)."""
    out: set[str] = set()
    prefix = entry.ns + _NS_SEP if entry.ns else ""
    for ns in _by_ns(txn, store, entry.thread_id):
        if ns == entry.ns or not ns.startswith(prefix):
            continue
        head = _call_of(entry.ns, ns)[0]
        _, sep, task = head.partition(_NS_END)
        if sep and task:
            out.add(task)
    return out


def _task_id(hexdigest: str) -> str:
    h = hexdigest
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _send_indices(last: Entry, step: Any, node: str, wanted: set[str]) -> dict[str, int]:
    """Task id -> ``Send`` index for the ids in ``wanted`` that LangGraph derived for a
    ``Send`` to ``node`` from ``last`` (``prepare_push_task_send``: the checkpoint id's
    bytes, then ``parent_ns|node``, the step, the node, ``__pregel_push`` and the index;
    XXH3-128 for checkpoints of format 2, SHA-1 before). A 128-bit match is the task;
    an id that matches none (another LangGraph's derivation, an index past
    :data:`SEND_TRIES`) is left out, and its subgraph is paired by node name."""
    if type(step) is not int or not wanted:
        return {}
    try:
        base = binascii.unhexlify(last.checkpoint_id.replace("-", ""))
    except (binascii.Error, ValueError):
        return {}
    ns = f"{last.ns}{_NS_SEP}{node}" if last.ns else node
    head = f"{ns}{step + 1}{node}{_PUSH}"
    found: dict[str, int] = {}
    for i in range(SEND_TRIES):
        raw = base + (head + str(i)).encode("utf-8", "surrogatepass")
        for tid in (
            _task_id(xxh3_128_hexdigest(raw)),
            _task_id(hashlib.sha1(raw, usedforsecurity=False).hexdigest()),
        ):
            if tid in wanted:
                found[tid] = i
        if len(found) == len(wanted):
            break
    return found


def _subgraphs(
    txn: Txn[memoryview],
    store: Store,
    serde: Any,
    last: tuple[Entry, Any],
    writes: list[StoredWrite],
    *,
    latest: dict[str, str] | None = None,
) -> dict[str, list[str]]:
    """The namespaces of subgraphs run from the checkpoint ``last`` (its entry and step)
    and not finished there (one level under its namespace, their newest checkpoint's
    ``metadata["parents"]`` naming it, no write of the task's at ``last`` but an
    interrupt, an error or resume values), grouped by the key pairing them across
    threads: the task path of the task running each (its writes at ``last``), else
    ``(node NAME, send I)`` (:func:`_send_indices`), else ``(node NAME)``; a node's
    later call of a subgraph (``node:<task id>|1``) adds `` call 1``; a
    ``checkpointer=True`` subgraph's is ``(kept NAME)`` (:func:`_kept_state`), its
    newest checkpoint put in ``latest`` under the key when given."""
    entry, step = last
    newest: dict[str, Entry] = {}
    own = _persistent_prefix(entry.ns)
    kept: dict[str, list[Entry]] = {}  # a checkpointer=True subgraph's ns -> its entries
    every = [e for held in _by_ns(txn, store, entry.thread_id).values() for e in held]
    for e in every:
        name = e.ns[len(own) :] if e.ns.startswith(own) and e.ns != entry.ns else _NS_END
        if _NS_END not in name:
            # a task id in no level below: checkpointer=True, at any depth (one under a
            # finished subgraph is memory too: the next run of its parent reads it)
            kept.setdefault(e.ns, []).append(e)
            continue
        # a subgraph run from ``last`` checkpoints after it (LangGraph's ids sort by time)
        if e.checkpoint_id <= entry.checkpoint_id:
            continue
        if entry.ns and not e.ns.startswith(entry.ns + _NS_SEP):
            continue
        head, _, call = _call_of(entry.ns, e.ns)
        if _NS_END not in head or not (call == "" or call.isdigit()):
            continue  # the parent's own, or deeper: compared by the level under it
        held = newest.get(e.ns)
        if held is None or e.checkpoint_id > held.checkpoint_id:
            newest[e.ns] = e
    paths = {w.task_id: w.task_path for w in writes if w.task_path.strip()}
    # A task that finished left its writes (or LangGraph's no-writes marker): a resume
    # applies those, compared already, and reads nothing of its subgraph's checkpoints.
    finished = {w.task_id for w in writes if w.channel not in _UNFINISHED}
    unkeyed: dict[str, list[tuple[str, str, str]]] = {}  # node -> (task id, ns, call)
    out: dict[str, list[str]] = {}
    for ns, e in sorted(newest.items()):
        if not stored(txn, store, e):
            continue
        with CheckpointView(store.backend, e.cid, verify=True, txn=txn) as view:
            md = metadata_of(serde, view_head(view, e)[1], f"checkpoint {e.cid.hex()}")
        parents = md.get("parents")
        if not isinstance(parents, Mapping) or parents.get(entry.ns) != entry.checkpoint_id:
            continue
        head, _, call = _call_of(entry.ns, ns)
        node, _, task = head.partition(_NS_END)
        if task in finished:
            continue
        called = f"{_CALL}{call}" if call else ""  # the node's later calls of a subgraph
        if task in paths:
            out.setdefault(paths[task] + called, []).append(ns)
        else:
            unkeyed.setdefault(node, []).append((task, ns, called))
    for name, waiting in sorted(unkeyed.items()):
        index = _send_indices(entry, step, name, {tid for tid, _, _ in waiting})
        for tid, sub_ns, called in waiting:
            at = index.get(tid)
            key = f"(node {name})" if at is None else f"(node {name}, send {at})"
            out.setdefault(key + called, []).append(sub_ns)
    for ns, history in sorted(kept.items()):
        chosen = _kept_state(txn, store, serde, entry, history)
        if chosen is not None:
            key = f"{_KEPT}{ns[len(own) :]})"
            out[key] = [chosen[0]]
            if latest is not None:
                latest[key] = chosen[1]
    return out


#: Between a key and the number of a node's later call of a subgraph (LangGraph keeps
#: the second call's checkpoints in ``node:<task id>|1``; review80: it was taken for a
#: deeper level and skipped, and two threads whose second calls stopped with other
#: pending writes were the same).
_CALL = " call "


def _call_of(parent: str, ns: str) -> tuple[str, str, str]:
    """``(node:<task id>, "|", call number or "")`` of a namespace under ``parent``."""
    return (ns[len(parent) + 1 :] if parent else ns).partition(_NS_SEP)


#: How a ``checkpointer=True`` subgraph's key starts (its node name and ``)`` follow).
_KEPT = "(kept "
#: Between a kept subgraph's namespace and the checkpoint id it is compared at.
_AT = "\x00"


def _persistent_prefix(ns: str) -> str:
    """What the namespace of a ``checkpointer=True`` subgraph of the graph running in
    ``ns`` starts with: ``ns`` without its task ids, then ``|`` (LangGraph's
    ``_own_checkpoint_config``); empty for the root."""
    if not ns:
        return ""
    return _NS_SEP.join(p.split(_NS_END)[0] for p in ns.split(_NS_SEP)) + _NS_SEP


def _kept_state(
    txn: Txn[memoryview], store: Store, serde: Any, entry: Entry, held: list[Entry]
) -> tuple[str, str] | None:
    """``ns NUL checkpoint id`` of the newest checkpoint a ``checkpointer=True``
    subgraph kept by the time of ``entry`` (its ``metadata["parents"]`` naming no later
    checkpoint of ``entry``'s namespace, nor of any namespace above it than ``entry``'s
    own ``parents`` do), and of its newest stored one, or None. That
    subgraph goes on from the first: on a resume when it stopped mid-run, on the
    thread's next run when it finished (its state is memory), so it is compared
    whatever its parent's writes (review80: it was skipped, its namespace holding no
    task id). A resume of a checkpoint its thread moved past with
    ``Command(resume=...)`` loads the second (:func:`_kept_moved_on`). lgdiff89: under
    a plain subgraph (``mid|inner``) the states a time travel's run of ``mid`` put, in
    another ``mid:<task id>``, name no checkpoint of the compared ``mid`` namespace:
    only the root's fork, later than the compared root checkpoint, tells them apart."""
    bounds = {entry.ns: entry.checkpoint_id}
    if entry.ns:  # the checkpoints above it by the time of it: its own parents
        with CheckpointView(store.backend, entry.cid, verify=True, txn=txn) as view:
            md = metadata_of(serde, view_head(view, entry)[1], f"checkpoint {entry.cid.hex()}")
        above = md.get("parents")
        if isinstance(above, Mapping):
            bounds.update({k: v for k, v in above.items() if type(k) is str and type(v) is str})
    newest: str | None = None
    for e in sorted(held, key=lambda e: e.checkpoint_id, reverse=True):
        if not stored(txn, store, e):
            continue
        newest = newest or f"{e.ns}{_AT}{e.checkpoint_id}"
        with CheckpointView(store.backend, e.cid, verify=True, txn=txn) as view:
            md = metadata_of(serde, view_head(view, e)[1], f"checkpoint {e.cid.hex()}")
        parents = md.get("parents")
        if isinstance(parents, Mapping) and any(
            isinstance(at := parents.get(ns), str) and at > bound for ns, bound in bounds.items()
        ):
            continue  # kept after the checkpoint compared (or one above it)
        return f"{e.ns}{_AT}{e.checkpoint_id}", newest
    return None


def _names(key: str) -> tuple[str, str]:
    """``(label, node)``: how the summary names a key's subgraph (``sub, send 0``,
    ``sub``, a pull task's node, a push task's whole path, as ``diff._node_of``) and
    the node ``nodes`` names."""
    base, called, call = key.rpartition(_CALL)
    if called and call.isdigit():
        label, node = _names(base)
        return f"{label}, call {call}", node
    if key.startswith(_KEPT) and key.endswith(")"):
        node = key[len(_KEPT) : -1]
        return f"{node} (checkpointer=True)", node
    if key.startswith("(node ") and key.endswith(")"):
        label = key[len("(node ") : -1]
        return label, label.split(", send ")[0]
    if key.startswith("~__pregel_pull, "):
        node = key[len("~__pregel_pull, ") :]
        return node, node
    return key, key


def subgraph_divergence(
    txn: Txn[memoryview],
    store: Store,
    serde: Any,
    last: tuple[tuple[Entry, Any], tuple[Entry, Any]],
    writes: tuple[list[StoredWrite], list[StoredWrite]],
    *,
    diff: Compare,
) -> Found | None:
    """The first divergence inside a subgraph run from the two last checkpoints (each
    side's entry and step), paired by key (:func:`_subgraphs`), or None. A subgraph
    interrupted mid-run keeps its finished nodes' writes pending on its own checkpoint,
    which resuming applies there: review77 found threads whose subgraphs' pending
    writes differed "same values" (the parent's pending writes hold only the interrupt)."""
    (ea, _), (eb, _) = last
    na: dict[str, str] = {}
    nb: dict[str, str] = {}
    sa = _subgraphs(txn, store, serde, last[0], writes[0], latest=na)
    sb = _subgraphs(txn, store, serde, last[1], writes[1], latest=nb)
    for key in sorted(set(sa) | set(sb)):
        la, lb = sa.get(key, []), sb.get(key, [])
        label, node = _names(key)
        if not la or not lb:
            how = "keeps checkpoints" if key.startswith(_KEPT) else "is mid-run"
            return Found(f"subgraph {label} {how} on {'A' if lb == [] else 'B'} only",
                         (node,), (), only=0 if lb == [] else 1)  # fmt: skip
        if len(la) == 1 and len(lb) == 1:
            inner = diff(txn, store, _conf(ea, la[0]), _conf(eb, lb[0]), serde)
            if inner.same:
                continue
            ns_a, ns_b = la[0].partition(_AT)[0], lb[0].partition(_AT)[0]
            said = f"subgraph {label} ({ns_a!r}, {ns_b!r}): {inner.summary}"
            nodes = tuple(sorted({node, *inner.nodes}))
            return Found(said, nodes, inner.channels, inner.undecidable)
        found = _group_diff(txn, store, serde, (ea, la), (eb, lb), names=(label, node), diff=diff)
        if found is not None:
            return found
    return _kept_moved_on(txn, store, serde, ((ea, sa, na), (eb, sb, nb)), diff=diff)


def _kept_moved_on(
    txn: Txn[memoryview],
    store: Store,
    serde: Any,
    sides: tuple[
        tuple[Entry, dict[str, list[str]], dict[str, str]],
        tuple[Entry, dict[str, list[str]], dict[str, str]],
    ],
    *,
    diff: Compare,
) -> Found | None:
    """Undecidable when a ``checkpointer=True`` subgraph went on past a compared
    checkpoint (its newest state is not the one compared) and the newest states of the
    two sides differ, else None (lgleft88). A resume of a checkpoint its thread moved
    past invoked with ``Command(resume=...)`` is no time travel: LangGraph 1.2.24 loads
    the subgraph's newest checkpoint, whatever run put it; invoked with None it starts
    the subgraph over from its state before. A ``Command(update=...)`` time travel of
    the interrupted checkpoint ran the subgraph again with ``u``: ``Command(resume=...)``
    of the checkpoint brought ``u`` back on that side only, and the diff said "same"."""
    (ea, sa, na), (eb, sb, nb) = sides
    for key in sorted(set(na) & set(nb)):
        if na[key] == sa[key][0] and nb[key] == sb[key][0]:
            continue
        inner = diff(txn, store, _conf(ea, na[key]), _conf(eb, nb[key]), serde)
        if inner.same:
            continue
        label, node = _names(key)
        moved = " and ".join(s for s, n, o in (("A", na, sa), ("B", nb, sb)) if n[key] != o[key][0])
        said = (
            f"subgraph {label} went on past the checkpoint compared on {moved}: a resume "
            "with Command(resume=...) loads its newest state, and the newest states differ "
            f"({inner.summary}); a time travel (None) starts it over from before: whether "
            "the resumes differ turns on how they are invoked"
        )
        return Found(said, tuple(sorted({node, *inner.nodes})), inner.channels, True)
    return None


def _conf(entry: Entry, ns: str) -> dict[str, Any]:
    """The config of a subgraph namespace (at a checkpoint id, a kept subgraph's)."""
    ns, _, at = ns.partition(_AT)
    conf = {"thread_id": entry.thread_id, "checkpoint_ns": ns}
    return {"configurable": {**conf, "checkpoint_id": at} if at else conf}


def _group_diff(
    txn: Txn[memoryview],
    store: Store,
    serde: Any,
    a: tuple[Entry, list[str]],
    b: tuple[Entry, list[str]],
    *,
    names: tuple[str, str],
    diff: Compare,
) -> Found | None:
    """Subgraphs sharing a key on a side, which of A's resumes as which of B's unknown:
    each is sorted into a class of equal ones (:func:`diff` with a class's first).
    One class holding as many of A's as of B's: every pairing resumes alike (None).
    Another count of some class on each side: no pairing does (a divergence). Else the
    pairing decides: ``undecidable``, never the same; so too when a comparison was."""
    reps: list[tuple[Entry, str]] = []
    counts: list[list[int]] = []
    unsure = False
    for side, (entry, held) in enumerate((a, b)):
        for ns in held:
            for k, (re, rns) in enumerate(reps):
                inner = diff(txn, store, _conf(entry, ns), _conf(re, rns), serde)
                unsure = unsure or inner.undecidable
                if inner.same:
                    counts[k][side] += 1
                    break
            else:
                reps.append((entry, ns))
                counts.append([1 - side, side])
    uneven = any(ca != cb for ca, cb in counts)
    if len(reps) == 1 and not uneven and not unsure:
        return None
    label, node = names
    shared = f"{len(a[1])} subgraphs {label} on A and {len(b[1])} on B share their key"
    if uneven and not unsure:
        said = f"{shared}, and {len(reps)} kinds of them are not as many on each side"
        return Found(said, (node,), ())
    said = (
        f"{shared} and differ ({len(reps)} kinds): which of B's resumes as which of A's "
        "is unknown, so the threads are not told the same (undecidable)"
    )
    return Found(said, (node,), (), undecidable=True)


def _step(txn: Txn[memoryview], store: Store, serde: Any, e: Entry) -> Any:
    """``metadata["step"]`` and ``["source"]`` of a stored checkpoint."""
    with CheckpointView(store.backend, e.cid, verify=True, txn=txn) as view:
        md = metadata_of(serde, view_head(view, e)[1], f"checkpoint {e.cid.hex()}")
    return md.get("step"), md.get("source")


def replay_bound(txn: Txn[memoryview], store: Store, serde: Any, entry: Entry) -> str:
    """The checkpoint id a time travel of ``entry`` (a compared thread's last) loads its
    subgraphs below (LangGraph 1.2.24 ``ReplayState``: its id, its parent's when it was
    put by ``update_state`` or a fork)."""
    if entry.parent and _step(txn, store, serde, entry)[1] in ("update", "fork"):
        return entry.parent
    return entry.checkpoint_id


def mid_run_below(
    txn: Txn[memoryview],
    store: Store,
    serde: Any,
    entry: Entry,
    writes: list[StoredWrite],
    *,
    bound: str | None,
) -> tuple[list[StoredWrite], list[str]]:
    """The writes pending at the newest checkpoint of each subgraph run from ``entry``
    (whose own pending writes are ``writes``) and not finished there, level by level
    (:func:`_subgraphs`, a ``checkpointer=True`` subgraph's too), and the nodes of
    those a time travel of the thread's checkpoint ``bound`` (:func:`replay_bound` of
    ``entry`` when None) starts over: what a resume of it goes on from below
    (review86: a time travel replays them too). LangGraph 1.2.24 loads a subgraph
    replayed the newest checkpoint of its namespace below ``bound`` (none for one whose
    namespace holds a task id; a ``checkpointer=True`` subgraph's state before this
    run) and applies its input again: every step it ran past its first runs again.
    lgleft87: a ``checkpointer=True`` subgraph's writes were not read, and a subgraph
    interrupted at its second step, holding no finished write, was "same" named
    against unnamed while its first node ran again on the named side only."""
    meta = store.backend.db("meta")
    out: list[StoredWrite] = []
    restarted: list[str] = []
    for key, spaces in _subgraphs(txn, store, serde, (entry, None), writes).items():
        for space in spaces:
            ns, _, at = space.partition(_AT)
            if bound is None:  # read only under a subgraph (a sealed thread stays unread)
                bound = replay_bound(txn, store, serde, entry)
            sub = entry_at(txn, meta, entry.thread_id, ns, at or None)
            if sub is None or not stored(txn, store, sub):
                continue
            held_ns = _by_ns(txn, store, entry.thread_id).get(ns, [])
            below = sorted(
                (e for e in held_ns if e.checkpoint_id < bound),
                key=lambda e: e.checkpoint_id,
                reverse=True,
            )
            base = next((e for e in below if stored(txn, store, e)), None)
            if base == sub:
                continue  # a replay loads the same checkpoint (a kept subgraph's memory)
            step = _step(txn, store, serde, sub)[0]
            start = -2 if base is None else _step(txn, store, serde, base)[0]
            if type(step) is not int or type(start) is not int or step > start + 2:
                # steps past its first run again (a kept one's node: its level's name)
                restarted.append(_names(key)[1].rpartition(_NS_SEP)[2])
            held = stored_writes(txn, meta, sub.thread_id, sub.ns, sub.checkpoint_id)
            more, again = mid_run_below(txn, store, serde, sub, held, bound=bound)
            out += held + more
            restarted += again
    return out, restarted
