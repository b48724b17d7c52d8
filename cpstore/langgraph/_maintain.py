"""Deleting, copying and pruning LangGraph threads on a cpstore store.

The index entries and writes go in one write txn per thread; the cpstore run
of a deleted thread is then swept (``Store.delete_run``). ``copy_thread``
records each checkpoint again on the target thread's run from the parts the
source stores: the objects already exist, so only manifests, index entries
and writes are written (no value bytes).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from langgraph.checkpoint.serde.types import _DeltaSnapshot

from cpstore.errors import ConflictError, GateError, InvalidInputError
from cpstore.langgraph._codec import (
    CHANNEL,
    HASHED_RUN,
    channel_parts,
    load_checkpoint,
    load_metadata,
    load_value,
    thread_runs,
)
from cpstore.langgraph._read import (
    Entry,
    StoredWrite,
    entry_key,
    load_parts,
    stored,
    stored_writes,
)
from cpstore.langgraph._write import Put, Writer, own_run
from cpstore.store import Store, retention
from cpstore.store.audit import AuditView
from cpstore.store.backend import Backend, Txn
from cpstore.store.branches import branches_in, reset_ref
from cpstore.store.content import records_of
from cpstore.store.lg_index import (
    CHECKPOINT_PREFIX,
    WRITE_PREFIX,
    checkpoint_key,
    field,
    pack,
    scan,
    write_key,
)
from cpstore.store.model import MAX_NAME_BYTES, ref_key, split_ref_key
from cpstore.store.reader import CheckpointView
from cpstore.store.retention import sweep

__all__ = ["copy_thread", "delete_for_runs", "delete_threads", "keep_latest"]


def _refuse_gated(store: Store, txn: Txn[memoryview], entries: list[Entry], what: str) -> None:
    """GateError when a checkpoint ``what`` would record again has a standing decision that
    is not an ACCEPT (a keyed log's ACCEPT only once its MAC verifies): recorded again it
    is a new checkpoint no decision names, which the thread went on from without the
    permit its original needs (audit52)."""
    view = AuditView(store.backend, txn)
    for e in entries:
        rec = view.latest_decision(e.cid.hex())
        if rec is None:
            continue
        view.check_audit_mac(rec.index)
        if rec.body.get("verdict") != "ACCEPT" or rec.body.get("findings"):
            raise GateError(
                f"{what} would record a checkpoint whose standing decision is "
                f"{rec.body.get('verdict')} again, as a new checkpoint no decision names; "
                "going on from it needs a ResumePermit (store.recorder(permit=))",
                where=f"thread {e.thread_id!r} checkpoint {e.checkpoint_id} "
                f"(cpstore {e.cid.hex()})",
                got=rec.body.get("decision_id"),
            )


def _thread_writes(thread_id: str) -> bytes:
    return WRITE_PREFIX + field(thread_id, "thread_id")


def _refuse_over_limit(thread_id: str, ns: str, checkpoint_id: str) -> None:
    """InvalidInputError (the limit, the size) when a put could not name these."""
    checkpoint_key(thread_id, ns, checkpoint_id)


def delete_threads(store: Store, writer: Writer, thread_ids: list[str]) -> None:
    """Delete the threads' entries and writes, then sweep their runs."""
    backend = store.backend
    meta = backend.db("meta")
    for thread_id in thread_ids:

        def drop(
            txn: Txn[memoryview], thread_id: str = thread_id
        ) -> tuple[set[str], dict[str, dict[bytes, bytes]]]:
            runs: set[str] = set()
            # unsized: an older release stored longer names (PostgreSQL), deleted here too
            keys = [k for k, _ in scan(txn, meta, checkpoint_key(thread_id, sized=False))]
            for key in keys:
                # a run no release put the thread on is refused, never swept (own_run)
                runs.add(own_run(Entry.decode(key, bytes(txn.get(key, db=meta) or b""))))
            keys += [k for k, _ in scan(txn, meta, _thread_writes(thread_id))]
            for key in keys:
                txn.delete(key, db=meta)
            # The thread's own run names too, when no entry names them: after
            # delete_for_runs took every entry, the checkpoints stay on the run (and a
            # hashed thread's next root goes to its scheme-2 run, leaving its scheme-1
            # one): swept here, or never (audit28).
            # Not ``lg:#...`` spelled by an id starting with "#" (a release before the
            # "#" rule used it): that name is another thread's hashed run.
            unnamed = set(thread_runs(thread_id)) - runs
            if thread_id.startswith("#"):
                unnamed.discard("lg:" + thread_id)
            # a run another thread's entries name too (two long ids whose XXH3-128
            # collide, on a scheme-1 run an older release named) is kept: sweeping it
            # would take the other thread's checkpoints
            shared = _shared_runs(txn, meta, thread_id, runs | unnamed)
            # the heads seen here are what the sweep drops: a put of the thread that
            # another process commits after this txn keeps its branch (audit28: the
            # sweep took it, leaving its acknowledged entry naming a swept checkpoint)
            return runs - shared, {r: _heads(backend, txn, r) for r in (runs | unnamed) - shared}

        runs, heads = backend.write_txn(drop)
        for run in sorted(heads):
            writer.forget(run)
            if run in runs or heads[run]:  # no whole-store sweep for a run without refs
                store.backend.live()
                retention.delete_run(
                    backend, run, only_heads=heads[run], keep_ref=_named_ref(backend, thread_id)
                )


def _named_ref(backend: Backend, thread_id: str) -> Callable[[Txn[memoryview], bytes], bool]:
    """delete_thread's sweep keeps a ref an index entry of the thread names, read in the
    sweep's txn. Its head being the one the drop txn saw is not enough: a checkpoint
    recorded again from the same parts on the same run and branch name (copy_thread,
    a keep_latest re-record) is the same cpstore checkpoint. Once ``main`` was freed
    between the drop txn and the sweep (another delete_thread's sweep, a keep_latest
    reset), a copy_thread acknowledged meanwhile landed on it at that very head and the
    sweep took it (tests/test_lg_delete_sweep_same_head.py)."""
    meta = backend.db("meta")

    def keep(txn: Txn[memoryview], ref: bytes) -> bool:
        # read in each call (the thread's entries left after the drop: few), never
        # cached past the txn (a retried txn reads again)
        run_branch = split_ref_key(ref)
        for k, v in scan(txn, meta, checkpoint_key(thread_id, sized=False)):
            e = Entry.decode(k, v)
            if (e.run, e.branch) == run_branch and _live(backend, txn, e):
                return True
        return False

    return keep


def _live(backend: Backend, txn: Txn[memoryview], e: Entry) -> bool:
    """Whether the entry's checkpoint is stored, or missing without a tombstone (damage:
    kept as if stored). An entry retention pruned holds no branch (it reads as gone)."""
    if records_of(backend.dbs).exists(txn, e.cid):
        return True
    return txn.get(e.cid, db=backend.db("tombstones")) is None


def _heads(backend: Backend, txn: Txn[memoryview], run: str) -> dict[bytes, bytes]:
    """Ref key -> head of every branch of ``run``, in ``txn``."""
    prefix = ref_key(run, "")
    keys: list[bytes] = []
    with txn.cursor(db=backend.db("refs")) as cur:
        found = cur.set_range(prefix)
        while found and bytes(cur.key()).startswith(prefix):
            keys.append(bytes(cur.key()))
            found = cur.next()
    return {k: h for k in keys if (h := backend.head(txn, k)) is not None}


def _shared_runs(txn: Txn[memoryview], meta: Any, thread_id: str, runs: set[str]) -> set[str]:
    """Those of ``runs`` that another thread's index entries also name. Only a hashed
    run (``lg:#``, a long id: ``_codec.run_for``) can be shared: a scheme-1 one
    (``lg:#<XXH3-128 hex>``, written before scheme 2) by ids whose XXH3-128 collide (not
    collision-resistant against chosen ids). A scheme-2 run (BLAKE2b-256) is its
    thread's alone, but it is checked too: a release before the ``#`` rule stored
    thread ``#b2:<hex>`` on the run of that name. Every entry is read then, so a store
    without hashed runs pays nothing."""
    hashed = {r for r in runs if r.startswith(HASHED_RUN)}
    if not hashed:
        return set()
    shared: set[str] = set()
    for k, v in scan(txn, meta, CHECKPOINT_PREFIX):
        e = Entry.decode(k, v)
        if e.run in hashed and e.thread_id != thread_id:
            shared.add(e.run)
    return shared


def _drop_entries(txn: Txn[memoryview], meta: Any, doomed: list[Entry]) -> None:
    for e in doomed:
        txn.delete(checkpoint_key(e.thread_id, e.ns, e.checkpoint_id, sized=False), db=meta)
        prefix = write_key(e.thread_id, e.ns, e.checkpoint_id, sized=False)
        for key, _ in list(scan(txn, meta, prefix)):
            txn.delete(key, db=meta)


def delete_for_runs(store: Store, writer: Writer, run_ids: list[str]) -> None:
    """Delete every entry (and its writes) whose metadata ``run_id`` is listed."""
    if not run_ids:
        return
    wanted = set(run_ids)
    backend = store.backend
    meta = backend.db("meta")

    def drop(txn: Txn[memoryview]) -> None:
        doomed = [
            e
            for e in (Entry.decode(k, v) for k, v in scan(txn, meta, b"lg/c/"))
            if e.run_id in wanted
        ]
        _drop_entries(txn, meta, doomed)

    backend.write_txn(drop)


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


_OPERATOR = "cpstore.langgraph"


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
    reason = _prune_reason(thread_id)  # before any work: an audit reason is a bounded name
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
            _copy_one(store, writer, thread_id, e, (parts, step, []), expect=bytes(entry))
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
            store.release_retained(head, operator=_OPERATOR, reason=reason, holder=reset.digest)
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


def _prune_reason(thread_id: str) -> str:
    """The audit reason of a keep_latest prune: the thread's id when it fits a name
    (``MAX_NAME_BYTES``), else its length and BLAKE2b-256 (a longer reason was refused
    after the kept checkpoints were re-recorded, leaving the old branches unswept; an
    XXH3-128 tag named two chosen ids alike, as their scheme-1 runs did)."""
    reason = f"LangGraph prune keep_latest of thread {thread_id!r}"
    if len(reason.encode("utf-8", "backslashreplace")) <= MAX_NAME_BYTES:
        return reason
    raw = thread_id.encode("utf-8", "surrogatepass")
    tag = hashlib.blake2b(raw, digest_size=32).hexdigest()
    size = len(thread_id)
    return f"LangGraph prune keep_latest of a thread id of {size} chars, BLAKE2b-256 {tag}"


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
    while missing and at is not None and at in group:
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
    return kept


def copy_thread(store: Store, writer: Writer, source: str, target: str) -> None:
    """Record every checkpoint of ``source`` on ``target`` (parents first), with its writes."""
    backend = store.backend
    meta = backend.db("meta")
    with backend.read_txn() as txn:
        prefix = checkpoint_key(source, sized=False)  # an older release's long names too
        keys: dict[tuple[str, str], bytes] = {}
        found: list[Entry] = []
        for k, v in scan(txn, meta, prefix):
            found.append(Entry.decode(k, v))
            keys[found[-1].ns, found[-1].checkpoint_id] = bytes(k)
        # every key the copy writes is sized before the first is written: a name over
        # the limit part-way would leave a part-copied thread (or a checkpoint without
        # its writes) behind
        for e in found:
            _refuse_over_limit(target, e.ns, e.checkpoint_id)
            for w in stored_writes(txn, meta, e.thread_id, e.ns, e.checkpoint_id):
                write_key(target, e.ns, e.checkpoint_id, w.task_id, w.idx)
    if not found:
        return
    ids = {(e.ns, e.checkpoint_id) for e in found}
    done: set[tuple[str, str]] = set()
    order: list[Entry] = []
    pending = sorted(found, key=lambda e: (e.ns, e.checkpoint_id))
    while pending:
        ready = [
            e
            for e in pending
            if e.parent is None or (e.ns, e.parent) not in ids or (e.ns, e.parent) in done
        ] or pending[:1]  # a cycle cannot be recorded in order: break it
        for e in ready:
            order.append(e)
            done.add((e.ns, e.checkpoint_id))
        pending = [e for e in pending if (e.ns, e.checkpoint_id) not in done]

    # Every checkpoint is read and decoded as the copy decodes it before the first is
    # recorded: one that is malformed (IntegrityError) refuses the whole copy, never
    # leaves the target with the checkpoints before it (audit25). One at a time, so a
    # long thread is never held in memory at once.
    # Each entry is read again in each txn (a keep_latest prune since the scan moved the
    # kept ones to new checkpoints). One gone before it was decoded is left out, as if the
    # deletion came first; one gone or moved after that (the source deleted or pruned by
    # anyone meanwhile) is the race, named: the target holds the ones copied before it,
    # never silently a part copy.
    def now(txn: Txn[memoryview], e: Entry) -> Entry | None:
        key = keys[e.ns, e.checkpoint_id]
        raw = txn.get(key, db=meta)
        return None if raw is None else Entry.decode(key, bytes(raw))

    live: list[Entry] = []
    for e in order:
        with backend.read_txn() as txn:
            cur = now(txn, e)
            if cur is not None and stored(txn, store, cur):
                _refuse_gated(store, txn, [cur], "copy_thread")
                _decoded(writer, cur, load_parts(txn, store, cur))
                live.append(cur)
    for n, e in enumerate(live):
        with backend.read_txn() as txn:
            if now(txn, e) != e or not stored(txn, store, e):
                raise ConflictError(
                    "the source thread changed during the copy (its checkpoints were deleted "
                    "or pruned after the copy read them); the target holds the ones copied "
                    "before it",
                    where=f"thread {source!r} checkpoint {e.checkpoint_id}",
                    expected="every checkpoint the copy read",
                    got=f"{n} of {len(live)} checkpoints copied to {target!r}",
                )
            _refuse_gated(store, txn, [e], "copy_thread")  # decided since the first pass
            parts = load_parts(txn, store, e)
            with CheckpointView(backend, e.cid, verify=True, txn=txn) as view:
                step = view.manifest.step
            writes = stored_writes(txn, meta, e.thread_id, e.ns, e.checkpoint_id)
        _copy_one(store, writer, target, e, (parts, step, writes))


def _decoded(
    writer: Writer, e: Entry, parts: dict[str, bytes]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(channel_versions, the channels' parts)`` of a checkpoint a copy records again;
    IntegrityError when its head or a channel's framing does not decode."""
    where = f"checkpoint {e.cid.hex()}"
    cp = load_checkpoint(writer.serde, parts["checkpoint"], where)
    load_metadata(writer.serde, parts["metadata"], where)  # never copy what cannot be read
    versions = cp.get("channel_versions") or {}
    values = {k: channel_parts(parts, k, where) for k in versions if CHANNEL + k in parts}
    return versions, values


def _copy_one(
    store: Store,
    writer: Writer,
    target: str,
    e: Entry,
    read: tuple[dict[str, bytes], int, list[StoredWrite]],
    *,
    expect: bytes | None = None,
) -> None:
    parts, step, writes = read
    head = {k: parts[k] for k in ("checkpoint", "metadata")}
    versions, values = _decoded(writer, e, parts)
    writer.commit(
        Put(
            target,
            e.ns,
            e.parent,
            e.checkpoint_id,
            step,
            e.run_id,
            head,
            {k: v for k, v in values.items() if k in versions},
            versions,
            {},
            expect_entry=expect,
        )
    )
    backend = store.backend
    meta = backend.db("meta")
    records = []
    for w in writes:
        key = write_key(target, e.ns, e.checkpoint_id, w.task_id, w.idx)
        body = [w.task_path, w.task_id, w.idx, w.channel, w.typed[0], w.typed[1]]
        records.append((key, pack(key, body)))

    held = entry_key(target, e.ns, e.checkpoint_id)

    def put(txn: Txn[memoryview]) -> None:
        # the checkpoint is recorded in the txn before: one deleted or pruned from the
        # target since (another process) takes no writes, never writes no entry names
        if txn.get(held, db=meta) is None:
            raise ConflictError(
                "the target thread changed during the copy (a checkpoint the copy recorded "
                "was deleted or pruned before its writes were written); its writes are not "
                "written",
                where=f"thread {target!r} checkpoint {e.checkpoint_id}",
                expected="the checkpoint the copy recorded",
                got="no index entry",
            )
        for key, value in records:
            txn.put(key, value, db=meta)

    if records:
        backend.write_txn(put)
