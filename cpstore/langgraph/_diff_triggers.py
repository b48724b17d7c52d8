"""Which tasks a resume from each of the two last checkpoints runs (review80).

LangGraph runs a node when one of its trigger channels is available and its version is
newer than the one the node last saw (``_algo._triggers``: ``channel_versions`` against
``versions_seen[node]``), and stops before/after nodes when any channel moved since the
last interrupt (``should_interrupt``: ``versions_seen["__interrupt__"]``). Both live in
the checkpoint's head, not its values: a node that writes a channel the value it
already holds leaves the values equal and moves the version, so a Pregel node
subscribed to it runs again on one thread and not on the other. ``diff_threads`` said
"same values at all 3 checkpoints" for two such threads, whose resumes differed
(``tests/test_review80_diff_triggers.py``).

Versions carry a random tail (``get_next_version``), so they are not compared as such:
what is compared is, per node either side's ``versions_seen`` names, the available
channels newer than it saw (a node neither names sees all of them on both sides,
alike), and whether any channel moved since the last interrupt.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from cpstore.errors import IntegrityError
from cpstore.langgraph._codec import PASS_THROUGH, load_checkpoint, unpack_typed
from cpstore.langgraph._diff_sealed import Undecidable, sealed
from cpstore.langgraph._read import Entry, view_head
from cpstore.store import Store
from cpstore.store.backend import Txn
from cpstore.store.reader import CheckpointView

__all__ = ["head_of", "trigger_divergence"]

#: How a format 1-3 head's pending Send's arg is compared (deterministic for equal args).
_PLAIN = JsonPlusSerializer()

#: ``versions_seen``'s key for the versions seen at the last interrupt (LangGraph's INTERRUPT).
_INTERRUPT = "__interrupt__"


def head_of(txn: Txn[memoryview], store: Store, serde: Any, entry: Entry) -> dict[str, Any]:
    """The LangGraph checkpoint (without values) of ``entry``; :class:`Undecidable` when
    it is sealed and ``serde`` does not decode it."""
    where = f"checkpoint {entry.cid.hex()}"
    with CheckpointView(store.backend, entry.cid, verify=True, txn=txn) as view:
        part = view_head(view, entry)[0]
    try:
        return load_checkpoint(serde, part, where)
    except IntegrityError:
        kind = unpack_typed(part, where)[0]
        if not sealed(kind):
            raise
        raise Undecidable(
            f"the head of {where} is stored sealed ({kind!r}) and the diff's serde does not "
            "decode it: pass the saver's serde (diff_threads(..., serde=...))"
        ) from None


def _newer(version: Any, seen: Any) -> bool:
    """LangGraph's ``version > seen`` (a seen version of another type: newer)."""
    try:
        return bool(version > seen)
    except TypeError:
        return True


def _fresh(
    head: Mapping[str, Any], available: Iterable[str]
) -> tuple[dict[str, frozenset[str]], bool]:
    """``(per node, the available channels newer than it saw; whether any channel moved
    since the last interrupt)``."""
    versions = head.get("channel_versions") or {}
    seen_all = head.get("versions_seen")
    seen_all = seen_all if isinstance(seen_all, Mapping) else {}
    null = type(next(iter(versions.values()), ""))()
    held = [c for c in available if c in versions]
    out: dict[str, frozenset[str]] = {}
    for node, got in seen_all.items():
        if node == _INTERRUPT or type(node) is not str:
            continue
        seen = got if isinstance(got, Mapping) else {}
        out[node] = frozenset(c for c in held if _newer(versions[c], seen.get(c, null)))
    stopped = seen_all.get(_INTERRUPT)
    stopped = stopped if isinstance(stopped, Mapping) else {}
    moved = any(_newer(v, stopped.get(c, null)) for c, v in versions.items())
    return out, moved


#: LangGraph's channel of pending ``Send``s (a format 1-3 head's ``pending_sends``).
_TASKS = "__pregel_tasks"


def _old_sends(head: Mapping[str, Any]) -> list[tuple[str, bytes]]:
    """A format 1-3 head's pending ``Send``s (review80: ignored, while LangGraph moves
    them into ``__pregel_tasks`` and runs them: other args were the same), each as its
    node and its arg as the plain JsonPlusSerializer writes it; empty for format 4."""
    v, sends = head.get("v"), head.get("pending_sends")
    if not isinstance(v, int) or v >= 4 or not isinstance(sends, list):
        return []
    out = []
    for send in sends:
        node, arg = getattr(send, "node", None), getattr(send, "arg", send)
        try:
            kind, data = _PLAIN.dumps_typed(arg)
        except PASS_THROUGH:
            raise
        except Exception:  # an arg the plain serde cannot write: its repr
            kind, data = "repr", repr(arg).encode("utf-8", "surrogatepass")
        out.append((str(node), kind.encode() + b"\x00" + bytes(data)))
    return out


def trigger_divergence(
    txn: Txn[memoryview],
    store: Store,
    serde: Any,
    last: tuple[Entry, Entry],
    available: tuple[Iterable[str], Iterable[str]],
) -> tuple[tuple[str, ...], tuple[str, ...], bool] | None:
    """``(nodes, channels, undecidable)`` whose triggering differs between the two last
    checkpoints (``available``: the channels each holds a value for), or None. A
    difference in whether a channel moved since the last interrupt is the node
    ``__interrupt__`` with no channel; other pending ``Send``s of a format 1-3 head,
    their nodes and ``__pregel_tasks``. A node whose freshness differs only on channels
    neither side's ``versions_seen`` names for it is ``undecidable`` (lgleft86): LangGraph
    records there only the node's triggers, so such a channel may be one (a Pregel
    node subscribed to it) or not (a ``StateGraph`` node's state key: a version hand-set
    to ``""``, LangGraph's null version, on ``log``, or a channel held on one side
    only, ran the same nodes while the diff said they differ)."""
    ha, hb = (head_of(txn, store, serde, e) for e in last)
    (fa, ma), (fb, mb) = _fresh(ha, available[0]), _fresh(hb, available[1])
    all_a = frozenset(c for c in available[0] if c in (ha.get("channel_versions") or {}))
    all_b = frozenset(c for c in available[1] if c in (hb.get("channel_versions") or {}))
    seen = (_seen_by(ha), _seen_by(hb))
    nodes: set[str] = set()
    channels: set[str] = set()
    maybe: tuple[set[str], set[str]] = (set(), set())  # nodes and channels not known triggers
    for node in sorted(set(fa) | set(fb)):
        # a node a side's versions_seen does not name has seen nothing: all are newer
        xa, xb = fa.get(node, all_a), fb.get(node, all_b)
        if xa == xb:
            continue
        if (xa ^ xb) & (seen[0].get(node, frozenset()) | seen[1].get(node, frozenset())):
            nodes.add(node)
            channels |= xa ^ xb
        else:
            maybe[0].add(node)
            maybe[1].update(xa ^ xb)
    if ma != mb:
        nodes.add(_INTERRUPT)
    sends = _old_sends(ha), _old_sends(hb)
    if sends[0] != sends[1]:
        # format 1-3 heads: LangGraph moves them into __pregel_tasks when it loads one
        nodes |= {n for n, _ in set(sends[0]) ^ set(sends[1])}
        channels.add(_TASKS)
    if not nodes and not channels:
        if maybe[0]:
            return tuple(sorted(maybe[0])), tuple(sorted(maybe[1])), True
        return None
    return tuple(sorted(nodes)), tuple(sorted(channels)), False


def _seen_by(head: Mapping[str, Any]) -> dict[str, frozenset[str]]:
    """Per node, the channels ``versions_seen`` names for it (its triggers LangGraph saw)."""
    seen_all = head.get("versions_seen")
    if not isinstance(seen_all, Mapping):
        return {}
    return {
        n: frozenset(c for c in s if type(c) is str)
        for n, s in seen_all.items()
        if type(n) is str and isinstance(s, Mapping)
    }
