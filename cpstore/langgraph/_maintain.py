"""Pruning LangGraph threads on a cpstore store (``keep_latest``), and the thread
maintenance ``CpstoreSaver`` calls.

Deleting and copying threads are ``_copy_delete``'s, re-exported here: a prune records
its kept checkpoints again with the copy's step and frees the old branches, then sweeps.
"""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.serde.types import _DeltaSnapshot

from cpstore.errors import ConflictError, InvalidInputError, NotFoundError
from cpstore.langgraph._codec import (
    CHANNEL,
    load_checkpoint,
    load_metadata,
    load_value,
    refuse_one_id,
    thread_runs,
)
from cpstore.langgraph._copy_delete import (
    PRUNE_OPERATOR,
    _copy_one,
    _decoded,
    _drop_entries,
    _live,
    _refuse_gated,
    _refuse_over_limit,
    _shared_runs,
    copy_thread,
    delete_for_runs,
    delete_threads,
    prune_reason,
    release_left_holds,
)
from cpstore.langgraph._read import Entry, entry_key, load_parts, parent_loop, stored
from cpstore.langgraph._write import Writer, own_run
from cpstore.store import Store
from cpstore.store.backend import Backend, Txn
from cpstore.store.branches import branches_in, reset_ref
from cpstore.store.lg_index import checkpoint_key, scan
from cpstore.store.reader import CheckpointView
from cpstore.store.retention import sweep

__all__ = [
    "copy_thread",
    "delete_for_runs",
    "delete_threads",
    "keep_latest",
    "thread_id_of",
    "thread_ids_of",
]


def thread_ids_of(thread_ids: Any) -> list[str]:
    """The threads ``prune(thread_ids)`` names, each as a config's ``thread_id`` is read
    (``str()``). ``InvalidInputError`` before anything is pruned for one str or bytes (a
    str is a sequence of one-character ids: ``prune("ab", strategy="delete")`` deleted
    threads ``a`` and ``b``, lgsaver96), for what is not iterable, and for a None or
    bytes entry (None deleted a thread named ``"None"``), as ``delete_for_runs`` refuses
    its run ids (``_codec.run_ids_of``)."""
    refuse_one_id(thread_ids, "prune takes a sequence of thread ids", "a list of thread ids")
    return [thread_id_of(t, f"thread_ids[{i}]") for i, t in enumerate(thread_ids)]


def thread_id_of(thread_id: Any, where: str) -> str:
    """``str(thread_id)``, as a config's ``thread_id`` is read; ``InvalidInputError`` for
    None (which names no thread: ``delete_thread(None)`` deleted a thread named
    ``"None"``, lgsaver96) and for bytes (``"b'...'"`` names no thread a put made)."""
    if thread_id is None or isinstance(thread_id, (bytes, bytearray, memoryview)):
        raise InvalidInputError(
            "a thread id is a str",
            where=where,
            expected="str",
            got=f"{type(thread_id).__name__} {thread_id!r}"[:120],
        )
    return str(thread_id)


def keep_latest(store: Store, writer: Writer, thread_ids: list[str]) -> None:
    """Keep each namespace's newest checkpoint and the ancestors its DeltaChannels need."""
    backend = store.backend
    meta = backend.db("meta")
    for thread_id in thread_ids:

        def prune(txn: Txn[memoryview], thread_id: str = thread_id) -> _Pruned:
            by_ns: dict[str, dict[str, Entry]] = {}
            for k, v in scan(txn, meta, checkpoint_key(thread_id, sized=False)):
                e = Entry.decode(k, v)
                # keep_latest records the kept checkpoints again under the same names:
                # names an older release stored past today's limit are refused here,
                # before anything is dropped (docs/langgraph.md, "Name sizes")
                _refuse_over_limit(e.thread_id, e.ns, e.checkpoint_id)
                own_run(e)  # _reclaim resets every branch of the runs the entries name
                by_ns.setdefault(e.ns, {})[e.checkpoint_id] = e
            runs = {e.run for group in by_ns.values() for e in group.values()}
            shared = _shared_runs(txn, meta, thread_id, runs)
            if shared:  # _reclaim resets and prunes every branch of the thread's runs
                raise InvalidInputError(
                    "the thread shares its cpstore run with another thread (their ids'"
                    " XXH3-128 collide: a run an older release named):"
                    " keep_latest would sweep the other's checkpoints",
                    where=f"run {sorted(shared)[0]}",
                    expected="a run of its own (copy_thread to another id, then delete)",
                    got=f"{len(shared)} shared run(s)",
                )
            doomed: list[Entry] = []
            chains: list[list[Entry]] = []
            for group in by_ns.values():
                kept = _needed(txn, store, writer.serde, group)
                doomed.extend(e for cid, e in group.items() if cid not in kept)
                chains.append(sorted((group[c] for c in kept), key=lambda e: e.checkpoint_id))
            # every kept checkpoint is recorded again below (_reclaim, _copy_one): one
            # that does not decode refuses the prune here, before anything is dropped
            # (audit25: it was dropped, then the re-record failed part-way)
            for chain in chains:
                for e in chain:
                    if stored(txn, store, e):
                        _decoded(writer, e, load_parts(txn, store, e))
            _refuse_gated(store, txn, [e for chain in chains for e in chain], "keep_latest")
            _drop_entries(txn, meta, doomed)
            # The heads _reclaim resets, as this txn sees them: a put after it moves its
            # branch, whose compare-and-set then fails, and the put is never swept.
            kept_runs = sorted({e.run for chain in chains for e in chain})
            return chains, {run: branches_in(backend, txn, run) for run in kept_runs}

        chains, before = backend.write_txn(prune)
        _reclaim(store, writer, thread_id, chains, before)


_OPERATOR = PRUNE_OPERATOR


#: The checkpoint metadata key LangGraph counts each DeltaChannel's updates since its
#: last snapshot under (absent on threads without delta channels).
DELTA_COUNTERS = "counters_since_delta_snapshot"

#: keep_latest's prune txn: the kept chains, and each of their runs' branch heads.
_Pruned = tuple[list[list[Entry]], dict[str, dict[str, str]]]


def _reclaim(
    store: Store,
    writer: Writer,
    thread_id: str,
    chains: list[list[Entry]],
    before: dict[str, dict[str, str]],
) -> None:
    """Free what ``keep_latest`` dropped from the index: the old branches' checkpoints.

    The kept checkpoints are recorded again, oldest first, on fresh branches
    (their parts exist: no value bytes are written; their index entries move to
    the new checkpoints in the same txns). Only then is each branch the run had
    before deleted (``reset_ref`` to None, compare-and-set on the head the prune's
    txn saw, ``before``, audited, then released), and what no branch reaches any more is
    swept. A branch another process moved meanwhile fails its compare-and-set and is
    left as it is, its whole lineage kept, so nothing acknowledged is swept.
    """
    kept = [e for chain in chains for e in chain]
    if not kept:
        return
    reason = prune_reason(thread_id)  # before any work: an audit reason is a bounded name
    writer.forget()
    meta = store.backend.db("meta")
    for e in kept:
        with store.backend.read_txn() as txn:
            key = entry_key(e.thread_id, e.ns, e.checkpoint_id)
            entry = txn.get(key, db=meta)
            if entry is None or Entry.decode(key, bytes(entry)) != e or not stored(txn, store, e):
                continue  # the thread was deleted, or another prune moved the entry, meanwhile
            _refuse_gated(store, txn, [e], "keep_latest")  # decided since the prune's txn
            parts = load_parts(txn, store, e)
            with CheckpointView(store.backend, e.cid, verify=True, txn=txn) as view:
                step = view.manifest.step
        try:
            # The entry moves only while it is the one read here (its txn checks): a
            # delete_thread acknowledged meanwhile is never undone.
            _copy_one(store, writer, thread_id, e, (parts, step, [], ()), expect=bytes(entry))
        except ConflictError:
            continue
    writer.forget()
    for run, heads in before.items():
        for branch, head in sorted(heads.items()):
            try:
                reset = reset_ref(
                    store.backend,
                    run,
                    branch,
                    None,
                    expected_old=head,
                    operator=_OPERATOR,
                    reason=reason,
                    guard=_unnamed(store.backend, thread_id, run, branch),
                )
            except ConflictError:
                continue  # moved by another writer since, or an entry names it: keep it
            # Its own hold only: another record's on the same head stands (holders69).
            try:
                store.release_retained(head, operator=_OPERATOR, reason=reason, holder=reset.digest)
            except NotFoundError:
                continue  # released meanwhile by another prune or delete of the thread
    # The holds an earlier prune of the thread left, killed between a reset and its
    # release: nothing else ever releases them (review88).
    release_left_holds(store, thread_id, set(before) | set(thread_runs(thread_id)))
    # Every lineage a branch still reaches is kept whole: the fresh branches hold just the
    # kept chains, so only what the resets let go is swept. A keep_last bound (the longest
    # kept chain) also cut a branch another process moved meanwhile: of two puts it
    # acknowledged, the older was swept (tests/test_lg_prune_late_chain.py).
    store.backend.live()
    sweep(store.backend)


def _unnamed(backend: Backend, thread_id: str, run: str, branch: str) -> Any:
    """A reset guard: ConflictError when an index entry of the thread names the branch.

    The compare-and-set on the head the prune txn saw is not enough: a kept checkpoint
    that is a root, recorded again on the same run and branch name, is the same cpstore
    checkpoint (same run, branch, parent, parts and step), so its id can be that head
    again. A second keep_latest whose prune txn read ``main`` at that head, before this
    one reset it, re-records onto the freed ``main`` and its reset then deleted the
    branch its entry had just moved to: the sweep took an acknowledged checkpoint
    (tests/test_lg_prune_twice_race.py). A branch an entry names is never reset, unless
    retention pruned the entry's checkpoint (it reads as gone: ``_live``)."""
    meta = backend.db("meta")

    def guard(txn: Txn[memoryview]) -> None:
        for k, v in scan(txn, meta, checkpoint_key(thread_id, sized=False)):
            e = Entry.decode(k, v)
            if e.run == run and e.branch == branch and _live(backend, txn, e):
                raise ConflictError(
                    "a LangGraph index entry names the branch: kept",
                    where=f"run {run!r} branch {branch!r}",
                    expected="no entry of the thread on the branch",
                    got=f"checkpoint {e.checkpoint_id[:64]!r}",
                )

    return guard


def _needed(txn: Txn[memoryview], store: Store, serde: Any, group: dict[str, Entry]) -> set[str]:
    """The newest id and its ancestors up to each delta channel's nearest stored value
    (a ``_DeltaSnapshot``), or up to where the chain ends when there is none yet.

    A channel the newest lacks a value for is a delta channel when the newest's metadata
    counts it (``counters_since_delta_snapshot``, LangGraph's DeltaChannel bookkeeping)
    or when its nearest value is a ``_DeltaSnapshot``. Its state is rebuilt from the
    writes of every ancestor back to that value (``get_delta_channel_history``), back to
    the root when no snapshot was taken yet: keeping the newest alone then read the
    channel as empty (tests/test_lg_prune_delta_root.py)."""
    latest = group[max(group)]
    kept = {latest.checkpoint_id}
    if not stored(txn, store, latest):
        return kept
    parts = load_parts(txn, store, latest)
    where = f"checkpoint {latest.cid.hex()}"
    cp = load_checkpoint(serde, parts["checkpoint"], where)
    counters = load_metadata(serde, parts["metadata"], where).get(DELTA_COUNTERS)
    delta = set(counters) if isinstance(counters, dict) else set()
    missing = {c for c in cp.get("channel_versions") or {} if c not in latest.have}
    chain: list[Entry] = []
    at = latest.parent
    seen = {latest.checkpoint_id}  # each ancestor once: the links can loop (parent_loop)
    while missing and at is not None and at in group and at not in seen:
        seen.add(at)
        entry = group[at]
        chain.append(entry)
        found = [c for c in missing if c in entry.have]
        if found and stored(txn, store, entry):
            held = load_parts(txn, store, entry)
            for c in found:
                spot = f"state[{CHANNEL + c!r}] of {entry.cid.hex()}"
                if c in delta or isinstance(load_value(serde, held, c, spot), _DeltaSnapshot):
                    kept.update(e.checkpoint_id for e in chain)
                missing.discard(c)
        at = entry.parent
    if missing & delta:  # no value before the chain ends: its history is the whole chain
        kept.update(e.checkpoint_id for e in chain)
    if chain and chain[-1].checkpoint_id in kept and chain[-1].parent in seen:
        # The kept ancestors loop back (re-puts): no order records them again with steps
        # that never go backwards; refused before anything is dropped (lgsaver96).
        raise parent_loop(chain[-1])
    return kept
