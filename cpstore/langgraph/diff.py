"""Where two LangGraph threads (or a thread and its fork) diverge: step, node and channel.

Each side is a LangGraph config (``thread_id``, ``checkpoint_ns``, optionally
``checkpoint_id``: the newest of the namespace otherwise). Both chains are walked from
the root to that checkpoint along ``parent`` links and compared position by position;
values are compared by their content digests (no plain value is deserialized, so it
works for any serde), the node is read from the task path of the writes that produced
the diverging checkpoint. A value or write an encrypting serde sealed (type
``<type>+<cipher>``: a random nonce makes equal values other bytes) whose bytes differ
is opened with the diff's serde (an EncryptedSerializer's cipher decrypts it, and the
inner serde's bytes are compared; review80) or decoded and compared as the plain
JsonPlusSerializer writes it; one it cannot open makes the result ``undecidable``,
never the same (``_diff_sealed``, lgsub80). Chains whose start retention pruned are
compared from the newest first step both keep (``_diff_chain``, review80); at the last
checkpoints, which nodes a resume triggers (``_diff_triggers``) and considers, the
writes' task ids (``_diff_updated``), the pending writes and the subgraphs a resume goes
on in (``_diff_subgraphs``) are compared too. A channel stored as the empty marker is
compared as one the checkpoint does not hold: LangGraph loads both as an empty channel.
A channel one side holds at a reducer's starting value (``[]``, ``0``...) and the
other never wrote is undecidable (lgleft86: a reducer loads both alike, a LastValue
does not). A DeltaChannel without a stored value (between snapshots) is rebuilt by
LangGraph from the parent chain's writes: it is compared by the writes to it at the
parent (review75), so equal positions before it make equal rebuilt values. Chains
equal to their last checkpoints at other steps are undecidable, never the same
(review86: a resume hands each node its step).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from cpstore.errors import NotFoundError
from cpstore.langgraph._codec import CHANNEL, SEGMENT
from cpstore.langgraph._diff_chain import aligned, nodes_at, one_checkpoint, parent_nodes, side
from cpstore.langgraph._diff_last import pending_diff, replayed_below
from cpstore.langgraph._diff_result import Point, ThreadDiff
from cpstore.langgraph._diff_sealed import (
    SEALED,
    UNSURE,
    Undecidable,
    metadata_of,
    plain_value,
    sealed_channel,
    starting_value,
    writes_digest,
)
from cpstore.langgraph._diff_subgraphs import one_scan
from cpstore.langgraph._read import entry_at, parent_loop, stored, stored_writes, view_head
from cpstore.store import Store
from cpstore.store.backend import Txn
from cpstore.store.reader import CheckpointView

__all__ = ["ThreadDiff", "diff_threads"]


#: The metadata key LangGraph counts a DeltaChannel's updates since its snapshot under.
_DELTA_COUNTERS = "counters_since_delta_snapshot"
#: Prefix of a delta channel's compared key when it holds no value (never a digest list).
_WRITES = b"writes:"


#: The serde type tag of the marker a put stores for a new version without a value.
_EMPTY = b"empty\x00"


def _is_empty(view: CheckpointView, name: str, key: bytes, empty: dict[bytes, bool]) -> bool:
    """Whether the channel part ``name`` (digest ``key``) is the empty marker: a channel
    LangGraph loads as empty, as it loads a channel the checkpoint does not hold (the
    marker is omitted from ``channel_values`` on read, as InMemorySaver omits an "empty"
    blob), so the two compare equal (lgfix72). Each digest is read (hash-checked) once per
    diff, and only for a channel the index entry does not list as holding a value; only
    its type tag is looked at, nothing is deserialized."""
    known = empty.get(key)
    if known is None:
        part = view.state_part(name)
        known = empty[key] = isinstance(part, bytes) and part.startswith(_EMPTY)
    return known


def _chain(
    txn: Txn[memoryview],
    store: Store,
    config: Mapping[str, Any],
    serde: Any,
    empty: dict[bytes, bool],
) -> list[Point]:
    thread_id, ns, checkpoint_id = side(config)
    meta = store.backend.db("meta")
    entry = entry_at(txn, meta, thread_id, ns, checkpoint_id)
    if entry is None:
        raise NotFoundError(
            "no such LangGraph checkpoint",
            where=f"thread {thread_id!r} ns {ns!r}",
            got=checkpoint_id or "no checkpoints",
        )
    out: list[Point] = []
    seen: set[str] = set()
    while entry is not None and stored(txn, store, entry):
        if entry.checkpoint_id in seen:
            raise parent_loop(entry)  # no root to align the chains at
        seen.add(entry.checkpoint_id)
        with CheckpointView(store.backend, entry.cid, verify=True, txn=txn) as view:
            parts: dict[str, bytes] = view.manifest.raw["state"]["parts"]
            where = f"checkpoint {entry.cid.hex()}"
            meta_value = metadata_of(serde, view_head(view, entry)[1], where)
            step = meta_value.get("step")
            counters = meta_value.get(_DELTA_COUNTERS)
            delta = frozenset(
                c for c in (counters if isinstance(counters, Mapping) else ()) if type(c) is str
            )
            values: dict[str, bytes] = {}
            # a channel the entry says holds a value is not read (a wrong hint costs only
            # a divergence reported as before lgfix72); any other is read to tell
            have = set(entry.have)
            for name, key in sorted(parts.items()):
                if name.startswith(CHANNEL):
                    channel = name[len(CHANNEL) :]
                    if channel not in have and _is_empty(view, name, bytes(key), empty):
                        continue  # compared as a channel the checkpoint does not hold
                    values[channel] = values.get(channel, b"") + bytes(key)
                elif name.startswith(SEGMENT):
                    channel = name[len(SEGMENT) :].rsplit("/", 1)[0]
                    values[channel] = values.get(channel, b"") + bytes(key)
        out.append(Point(entry, step, values, delta))
        entry = (
            None
            if entry.parent is None
            else entry_at(txn, meta, entry.thread_id, entry.ns, entry.parent)
        )
    if not out:  # review80: two such sides were "same values at all 0 checkpoints"
        raise NotFoundError(
            "the LangGraph checkpoint was pruned by retention: its values are gone",
            where=f"thread {thread_id!r} ns {ns!r}",
            got=checkpoint_id or "the newest",
        )
    out.reverse()
    return out


def _rebuilt(
    txn: Txn[memoryview],
    store: Store,
    serde: Any,
    point: Point,
    *,
    deltas: frozenset[str],
    cache: dict[tuple[str, str, str], dict[str, bytes]],
) -> dict[str, bytes]:
    """``point.values`` plus, for each of ``deltas`` it holds no value for, the digest of
    the writes to it at the parent in ``writes_sort_key`` order (as
    ``get_delta_channel_history`` replays them; their serde pairs, nothing deserialized).
    LangGraph rebuilds such a channel from its value at the nearest ancestor holding one
    plus those writes: chains equal at every position before, with equal writes here,
    rebuild it equal; other writes (or another order) rebuild it otherwise (review75:
    they compared equal). A root's is the empty list of writes."""
    missing = [c for c in sorted(deltas) if c not in point.values]
    if not missing:
        return point.values
    e = point.entry
    written: dict[str, bytes] = {}
    if e.parent is not None:
        key = (e.thread_id, e.ns, e.parent)
        held = cache.get(key)
        if held is None:
            meta = store.backend.db("meta")
            writes = stored_writes(txn, meta, *key)
            held = cache[key] = writes_digest(writes, paths=False, serde=serde)
        written = held
    out = dict(point.values)
    for c in missing:
        out[c] = _WRITES + written.get(c, b"")
    return out


def _settle(
    txn: Txn[memoryview], store: Store, serde: Any, pair: tuple[Point, Point], differ: list[str]
) -> tuple[list[str], list[str], list[str]]:
    """``(differ, unsure, starting)``: of the channels whose digests differ at a
    position, those whose values differ, those the diff cannot tell, and those one side
    holds at the value a reducer channel starts as (``[]``, ``0``...) and the other
    never wrote (lgleft86: a reducer loads both alike, a ``LastValue`` does not, and the
    checkpoint does not say which the channel is). A plain value differs by its bytes
    (nothing is decoded); a sealed one (either side) is decoded with ``serde`` on both
    and compared as the plain JsonPlusSerializer writes it (lgsub80: a cipher's nonce
    made equal values differ); one that does not decode is unsure, as is a
    DeltaChannel's writes holding a sealed write that did not."""
    pa, pb = pair
    out: list[str] = []
    unsure: list[str] = []
    starting: list[str] = []
    with (
        CheckpointView(store.backend, pa.entry.cid, verify=True, txn=txn) as va,
        CheckpointView(store.backend, pb.entry.cid, verify=True, txn=txn) as vb,
    ):
        for c in differ:
            ka, kb = pa.values.get(c, b""), pb.values.get(c, b"")
            if ka.startswith(_WRITES) or kb.startswith(_WRITES):
                both = ka.startswith(_WRITES) and kb.startswith(_WRITES)
                doubt = both and UNSURE in (ka[-1:], kb[-1:])
                (unsure if doubt else out).append(c)
                continue
            if not ka or not kb:  # held on one side only
                v, p = (va, pa) if ka else (vb, pb)
                if starting_value(serde, v, c, f"checkpoint {p.entry.cid.hex()}"):
                    starting.append(c)
                    continue
            if not (sealed_channel(va, c) or sealed_channel(vb, c)):
                out.append(c)
                continue
            got = [
                plain_value(serde, v, c, f"checkpoint {p.entry.cid.hex()}")
                if c in p.values
                else b""
                for v, p in ((va, pa), (vb, pb))
            ]
            if None in got:
                unsure.append(c)
            elif got[0] != got[1]:
                out.append(c)
    return out, unsure, starting


def diff_threads(
    store: Store,
    config_a: Mapping[str, Any],
    config_b: Mapping[str, Any],
    *,
    serde: Any = None,
) -> ThreadDiff:
    """The first step, node and channel where two checkpoint chains diverge.

    ``serde`` reads each checkpoint's metadata (for its step); the saver's
    default, JsonPlusSerializer, when None. Values are compared by digest; a
    value or pending write stored sealed by an encrypting serde (an
    ``EncryptedSerializer``: equal values are other bytes) whose bytes differ is
    opened with ``serde`` on both sides: an ``EncryptedSerializer``'s cipher
    decrypts it and its inner serde's bytes are compared (any other serde decodes
    it, compared as JsonPlusSerializer writes it). Pass the saver's serde for such
    threads: without it (or with another key) the result is ``undecidable``
    (``same`` False), as it is for subgraphs sharing a task path that cannot be
    paired, and for last checkpoints whose ``updated_channels`` or pending writes'
    task ids are not LangGraph's own, and for what turns on the graph, which a
    checkpoint does not hold (``ThreadDiff.undecidable``). Both sides naming one
    checkpoint of one thread are the same without decoding anything. A side whose
    checkpoint retention swept is NotFoundError.
    """
    serde = JsonPlusSerializer() if serde is None else serde
    with store.backend.read_txn() as txn, one_scan():
        named = side(config_a)[2] is not None, side(config_b)[2] is not None
        return _diff(txn, store, config_a, config_b, serde, named=named)


def _diff(
    txn: Txn[memoryview],
    store: Store,
    config_a: Mapping[str, Any],
    config_b: Mapping[str, Any],
    serde: Any,
    *,
    named: tuple[bool, bool] | None = None,
) -> ThreadDiff:
    """:func:`diff_threads` in a read txn (a subgraph's namespaces compared in the same);
    a checkpoint whose sealed metadata does not decode makes it undecidable."""
    try:
        return _compare(txn, store, (config_a, config_b), serde, named)
    except Undecidable as exc:
        return ThreadDiff(
            False, None, None, (), (), None, None, None, f"cannot tell: {exc.args[0]}",
            undecidable=True,
        )  # fmt: skip


def _noted(found: ThreadDiff, doubt: ThreadDiff | None, why: str = SEALED) -> ThreadDiff:
    """A divergence found after a position the diff could not tell (``doubt``, ``why``
    not): said."""
    if doubt is None or found.undecidable:
        return doubt or found
    note = f"; checkpoint {doubt.index} may differ already ({', '.join(doubt.channels)}: {why})"
    return dataclasses.replace(found, summary=found.summary + note)


def _why(unsure: list[str], starting: list[str]) -> tuple[str, str]:
    """Why the channels of a position it cannot tell may differ (``_settle``): the
    summary's words after the nodes, and the note a later divergence gets."""
    if not starting:
        return f" differ by their bytes, {SEALED}", SEALED
    said = [f"{', '.join(unsure)} differ by their bytes, {SEALED}"] if unsure else []
    one = len(starting) == 1
    said.append(
        f"{', '.join(starting)} {'holds' if one else 'hold'} on one side the value a reducer "
        f"channel starts as ([], 0...) and {'was' if one else 'were'} never written on the "
        "other: LangGraph loads both alike for a reducer channel, not for a LastValue, and "
        "which it is is not known without the graph"
    )
    return ": " + "; ".join(said), "; ".join(said)


def _itself(
    txn: Txn[memoryview],
    store: Store,
    serde: Any,
    configs: tuple[Mapping[str, Any], Mapping[str, Any]],
    named: tuple[bool, bool] | None,
) -> ThreadDiff | None:
    """The same when both sides name one checkpoint of one thread and namespace
    (:func:`~cpstore.langgraph._diff_chain.one_checkpoint`), else None; None too when
    one side names it by id and the other by none and it holds writes a replay treats
    otherwise (review86: a resume invoked with None time-travels on the named side
    only; compared in full, :func:`~cpstore.langgraph._diff_last.named_newest`)."""
    n = one_checkpoint(txn, store, serde, configs)
    if n is None:
        return None
    if named is not None and named[0] != named[1]:
        thread_id, ns, _ = side(configs[0])
        meta = store.backend.db("meta")
        newest = entry_at(txn, meta, thread_id, ns, None)
        if newest is not None:
            held = stored_writes(txn, meta, thread_id, ns, newest.checkpoint_id)
            if any(replayed_below(txn, store, serde, [(newest, held)])):
                return None
    said = f"same values at all {n} checkpoints (one checkpoint of one thread on both sides)"
    return ThreadDiff(True, None, None, (), (), None, None, n - 1, said)


def _compare(
    txn: Txn[memoryview],
    store: Store,
    configs: tuple[Mapping[str, Any], Mapping[str, Any]],
    serde: Any,
    named: tuple[bool, bool] | None,
) -> ThreadDiff:
    """:func:`_diff`, letting :class:`Undecidable` out."""
    config_a, config_b = configs
    itself = _itself(txn, store, serde, (config_a, config_b), named)
    if itself is not None:
        return itself
    empty: dict[bytes, bool] = {}  # digest -> whether it is the empty marker
    a, b, cut = aligned(
        _chain(txn, store, config_a, serde, empty), _chain(txn, store, config_b, serde, empty)
    )
    found = _walk(txn, store, serde, (a, b), named)
    return dataclasses.replace(found, summary=found.summary + cut) if cut else found


def _walk(
    txn: Txn[memoryview],
    store: Store,
    serde: Any,
    pair: tuple[list[Point], list[Point]],
    named: tuple[bool, bool] | None,
) -> ThreadDiff:
    """:func:`_compare` on the two chains, aligned (``named``: :func:`pending_diff`'s)."""
    a, b = pair
    shared = None
    # a channel either side's metadata counts as a DeltaChannel anywhere in its chain
    deltas = frozenset().union(*(p.delta for p in a), *(p.delta for p in b))
    cache: dict[tuple[str, str, str], dict[str, bytes]] = {}
    doubt: ThreadDiff | None = None  # the first position whose values it cannot tell
    doubt_why = ""
    for i in range(min(len(a), len(b))):
        pa, pb = a[i], b[i]
        if pa.entry.cid == pb.entry.cid:
            shared = i
        va = _rebuilt(txn, store, serde, pa, deltas=deltas, cache=cache)
        vb = _rebuilt(txn, store, serde, pb, deltas=deltas, cache=cache)
        differ = sorted(c for c in set(va) | set(vb) if va.get(c) != vb.get(c))
        if not differ:
            continue
        differ, unsure, starting = _settle(
            txn,
            store,
            serde,
            (dataclasses.replace(pa, values=va), dataclasses.replace(pb, values=vb)),
            differ,
        )
        if not differ and ((not unsure and not starting) or doubt is not None):
            continue
        channels = differ or sorted(unsure + starting)
        nodes = nodes_at(txn, store, (a, b), i, set(channels))
        found = ThreadDiff(
            False,
            i,
            pa.step,
            tuple(nodes),
            tuple(channels),
            pa.entry.checkpoint_id,
            pb.entry.checkpoint_id,
            shared,
            f"diverge at step {pa.step} (checkpoint {i} of each chain): node "
            f"{', '.join(nodes)} wrote different {', '.join(channels)}",
        )
        if differ:
            return _noted(found, doubt, doubt_why)
        why, doubt_why = _why(unsure, starting)
        doubt = dataclasses.replace(
            found,
            summary=f"cannot tell at step {pa.step} (checkpoint {i} of each chain): "
            f"{', '.join(channels)} written by node {', '.join(nodes)}{why}",
            undecidable=True,
        )
    if len(a) == len(b):
        pending = pending_diff(txn, store, serde, (a, b), shared, diff=_diff, named=named)
        if pending is not None:
            return _noted(pending, doubt, doubt_why)
        if doubt is not None:
            return doubt
        if a[-1].step != b[-1].step:
            return _other_steps(a, b, shared)
        return ThreadDiff(
            True,
            None,
            None,
            (),
            (),
            None,
            None,
            shared,
            f"same values at all {len(a)} checkpoints",
        )
    longer, name = (a, "A") if len(a) > len(b) else (b, "B")
    i = min(len(a), len(b))
    nxt = longer[i]
    return _noted(
        ThreadDiff(
            False,
            i,
            nxt.step,
            tuple(parent_nodes(txn, store, (nxt,), set())),
            (),
            a[i].entry.checkpoint_id if len(a) > i else None,
            b[i].entry.checkpoint_id if len(b) > i else None,
            shared,
            f"same values for {i} checkpoints; only {name} goes on (step {nxt.step})",
        ),
        doubt,
    )


def _other_steps(a: list[Point], b: list[Point], shared: int | None) -> ThreadDiff:
    """Chains equal to the last but for the steps of their last checkpoints (a
    ``__copy__`` at its original's step plus one, a step ``durability="exit"`` did not
    record, roots of two steps): undecidable, not the same (review86). A resume runs its
    first tasks at the step after its checkpoint's and hands each node that step
    (``config["metadata"]["langgraph_step"]``): a node reading it wrote ``n@2`` on one
    side and ``n@3`` on the other while the diff said "same values at all 3
    checkpoints"; whether a node reads it is the graph's, not the checkpoint's."""
    pa, pb = a[-1], b[-1]
    return ThreadDiff(
        False, len(a) - 1, pa.step, (), (), pa.entry.checkpoint_id, pb.entry.checkpoint_id,
        shared,
        f"cannot tell: same values at all {len(a)} checkpoints, but not at the same step: "
        "a resume of each runs its nodes at another step, which a node reads (its config's "
        "langgraph_step) or not, as the graph says",
        undecidable=True,
    )  # fmt: skip
