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

And each id is derived as LangGraph derives it (review84), from what the heads show:
a pull task's from its checkpoint id, namespace, step (the checkpoint's plus one), node
and triggers (the sorted channels either side's ``versions_seen`` names for the node,
its ``branch:to:`` channel, or any one channel of the heads); a ``Send``'s from its
index and target (the ``Send``'s node in ``__pregel_tasks``, or a node either head
names). A task path whose ids derive on one side
and not on the other (or with other triggers) is undecidable: the write under the id
that does not derive is not handed back, and its task runs again on that side only.
Before, a thread whose writes were copied under checkpoints put with new ids, each
write under an id of its own, was "same values at all 2 checkpoints" while its resume
ran the finished task again (``tests/test_review84_task_ids.py``). Ids derived from
neither side (triggers the heads do not show) are left to the rules above.

A task's writes under the null task's id on one side only (review84) are a divergence:
those the resume applies first, handing none back to the task, which runs again
(undecidable on the empty task path, which writes of no task are stored under too).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from hashlib import sha1
from typing import Any

from xxhash import xxh3_128_hexdigest

from cpstore.langgraph._codec import PASS_THROUGH, load_value
from cpstore.langgraph._diff_chain import node_of
from cpstore.langgraph._read import Entry, StoredWrite, load_parts
from cpstore.store import Store
from cpstore.store.backend import Txn

__all__ = ["PUSH_PATH", "Side", "targets", "task_id_divergence"]

#: The task id LangGraph stores input and ``Command(update=...)`` writes under.
_NULL_TASK_ID = "00000000-0000-0000-0000-000000000000"


#: How a pull task's (a node's) and a ``Send``'s task paths start (``task_path_str``).
_PULL_PATH = "~__pregel_pull, "
PUSH_PATH = "~__pregel_push, "
#: LangGraph's channel of pending ``Send``s.
_TASKS = "__pregel_tasks"
#: The channel prefix of a StateGraph node's own trigger.
_TO = "branch:to:"


def _hashed(v: Any, namespace: bytes, parts: tuple[str, ...]) -> str:
    """LangGraph's ``_xxhash_str`` (a head of format 2 or later) or ``_uuid5_str``."""
    data = "".join(parts).encode()
    if isinstance(v, int) and v > 1:
        digest = xxh3_128_hexdigest(namespace + data)
    else:
        digest = sha1(namespace + data, usedforsecurity=False).hexdigest()
    return f"{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


#: What a side's ids are derived from: its entry, head, ``metadata["step"]`` and the
#: targets of the ``Send``s it holds (:func:`targets`).
Side = tuple[Entry, Mapping[str, Any], Any, tuple[str, ...]]


def targets(txn: Txn[memoryview], store: Store, serde: Any, entry: Entry) -> tuple[str, ...]:
    """The nodes of the ``Send``s ``entry``'s checkpoint holds (``__pregel_tasks``) in
    their order, a resume's push tasks; empty when it holds none or they do not load."""
    where = f"checkpoint {entry.cid.hex()}"
    try:
        sends = load_value(serde, load_parts(txn, store, entry), _TASKS, where)
    except PASS_THROUGH:
        raise
    except Exception:  # none held, sealed, or not Sends: other ids are not derived
        return ()
    if not isinstance(sends, list):
        return ()
    return tuple(n if type(n := getattr(s, "node", None)) is str else "" for s in sends)


def _names(heads: tuple[Mapping[str, Any], Mapping[str, Any]]) -> tuple[set[str], set[str]]:
    """``(nodes, channels)`` the two heads name: ``versions_seen``'s nodes and the
    targets of ``branch:to:`` channels; every channel of ``channel_versions``."""
    nodes: set[str] = set()
    channels: set[str] = set()
    for head in heads:
        seen = head.get("versions_seen")
        if isinstance(seen, Mapping):
            nodes |= {n for n in seen if type(n) is str and n != "__interrupt__"}
        versions = head.get("channel_versions")
        if isinstance(versions, Mapping):
            channels |= {c for c in versions if type(c) is str}
    nodes |= {c[len(_TO) :] for c in channels if c.startswith(_TO)}
    return nodes, channels


def _candidates(
    path: str,
    heads: tuple[Mapping[str, Any], Mapping[str, Any]],
    sends: tuple[tuple[str, ...], tuple[str, ...]] = ((), ()),
) -> list[tuple[str, str, tuple[str, ...]]]:
    """``(node, kind, parts after the node)`` a task of ``path`` may derive its id from
    (``sends``: :func:`targets` of each side)."""
    nodes, channels = _names(heads)
    if path.startswith(_PULL_PATH):
        node = path[len(_PULL_PATH) :]
        triggers: set[tuple[str, ...]] = {(_TO + node,), *((c,) for c in channels)}
        for head in heads:
            seen = head.get("versions_seen")
            got = seen.get(node) if isinstance(seen, Mapping) else None
            if isinstance(got, Mapping) and got and all(type(c) is str for c in got):
                triggers.add(tuple(sorted(got)))
        return [(node, "__pregel_pull", t) for t in sorted(triggers)]
    if path.startswith(PUSH_PATH):
        idx = path[len(PUSH_PATH) :].split(", ", maxsplit=1)[0]
        if idx.isascii() and idx.isdigit():
            nodes |= {n for s in sends for n in s[int(idx) : int(idx) + 1] if n}
            return [(n, "__pregel_push", (str(int(idx)),)) for n in sorted(nodes)]
    return []


def _deriving(side: Side, ids: set[str], cands: list[tuple[str, str, tuple[str, ...]]]) -> set[int]:
    """The candidates (by index) that derive one of ``ids`` from ``side``'s checkpoint."""
    entry, head, step, _ = side
    if type(step) is not int:
        return set()
    try:
        namespace = bytes.fromhex(entry.checkpoint_id.replace("-", ""))
    except ValueError:
        return set()
    out = set()
    for i, (node, kind, rest) in enumerate(cands):
        ns = f"{entry.ns}|{node}" if entry.ns else node
        if _hashed(head.get("v"), namespace, (ns, str(step + 1), node, kind, *rest)) in ids:
            out.add(i)
    return out


def _underived(
    sides: tuple[Side, Side], ia: dict[str, set[str]], ib: dict[str, set[str]]
) -> list[str]:
    """The task paths whose ids derive on one side only (or from other triggers)."""
    heads = (sides[0][1], sides[1][1])
    odd = []
    for p in sorted(ia.keys() & ib.keys()):
        cands = _candidates(p, heads, (sides[0][3], sides[1][3]))
        da, db = _deriving(sides[0], ia[p], cands), _deriving(sides[1], ib[p], cands)
        if (da or db) and da.isdisjoint(db):
            odd.append(p)
    return odd


def _by_path(writes: list[StoredWrite]) -> dict[str, set[str]]:
    out: dict[str, set[str]] = defaultdict(set)
    for w in writes:
        if w.task_id != _NULL_TASK_ID:
            out[w.task_path].add(w.task_id)
    return out


def _nulls(writes: list[StoredWrite]) -> Counter[tuple[str, str, bool]]:
    """Each write's task path and channel, and whether it is the null task's."""
    return Counter((w.task_path, w.channel, w.task_id == _NULL_TASK_ID) for w in writes)


def _null_on_one_side(
    writes: tuple[list[StoredWrite], list[StoredWrite]],
) -> tuple[tuple[str, ...], tuple[str, ...], bool, str] | None:
    """The writes of a task path stored under the null task's id on one side only
    (review84): a resume applies those before it runs anything and hands none back to
    the task, which runs again; the other side's are handed back. Before, two such
    threads were "same values at all 2 checkpoints" while one resume ran the task again
    and wrote its value twice. A divergence for a task's path; undecidable for the empty
    path, which LangGraph stores both null writes and writes of no task under."""
    na, nb = _nulls(writes[0]), _nulls(writes[1])
    odd = sorted({k[:2] for k in (na - nb) + (nb - na)})
    if not odd:
        return None
    paths = {p for p, _ in odd}
    chosen = [w for w in writes[0] + writes[1] if (w.task_path, w.channel) in odd]
    nodes = tuple(sorted({node_of(w) for w in chosen}))
    channels = tuple(sorted({c for _, c in odd}))
    unsure = paths == {""}
    why = (
        f"the pending writes of node {', '.join(nodes)} to {', '.join(channels)} are stored "
        "under the null task's id on one side only: a resume applies those first and "
        "hands none back to the task, which runs again"
        + (" (if a task of theirs runs)" if unsure else "")
    )
    return nodes, channels, unsure, why


def task_id_divergence(
    sides: tuple[Side, Side], writes: tuple[list[StoredWrite], list[StoredWrite]]
) -> tuple[tuple[str, ...], tuple[str, ...], bool, str] | None:
    """``(nodes, channels, undecidable, why)`` when the task ids of the last checkpoints'
    writes (equal but for their ids; ``sides``: each last checkpoint's entry, head and
    step) are not what LangGraph derives on both sides, else None."""
    found = _null_on_one_side(writes)
    if found is not None:
        return found
    last = (sides[0][0], sides[1][0])
    one = (last[0].ns, last[0].checkpoint_id) == (last[1].ns, last[1].checkpoint_id)
    ia, ib = _by_path(writes[0]), _by_path(writes[1])
    odd = sorted(p for p in ia.keys() & ib.keys() if (ia[p] != ib[p] if one else ia[p] & ib[p]))
    if not odd and not one:
        underived = _underived(sides, ia, ib)
        if underived:
            return _said(underived, writes, "derive from their checkpoint on one side only")
    if not odd:
        return None
    how = (
        "differ, where one checkpoint id derives one id"
        if one
        else "are the same on both sides, where other checkpoint ids derive other ids"
    )
    return _said(odd, writes, how)


def _said(
    odd: list[str], writes: tuple[list[StoredWrite], list[StoredWrite]], how: str
) -> tuple[tuple[str, ...], tuple[str, ...], bool, str]:
    """The doubt about the task ids of the writes of the task paths ``odd``."""
    chosen = [w for w in writes[0] + writes[1] if w.task_path in odd]
    nodes = tuple(sorted({node_of(w) for w in chosen}))
    channels = tuple(sorted({w.channel for w in chosen}))
    why = (
        f"the task ids of the pending writes of node {', '.join(nodes)} {how}: a resume "
        "hands a write back to its task by id, so the task may run again on one side only"
    )
    return nodes, channels, True, why
