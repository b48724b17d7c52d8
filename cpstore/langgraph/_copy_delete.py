"""Deleting and copying LangGraph threads on a cpstore store.

The index entries and writes go in one write txn per thread; the cpstore run
of a deleted thread is then swept (``Store.delete_run``). ``copy_thread``
records each checkpoint again on the target thread's run from the parts the
source stores: the objects already exist, so only manifests, index entries
and writes are written (no value bytes).

A keep_latest prune (``_maintain``, which sits above this module and re-exports its
public names) records its kept checkpoints again with the same step (``_copy_one``), after
the same checks (``_refuse_gated``, ``_refuse_over_limit``, ``_decoded``), and drops
entries and tells shared runs and live entries as the deletes here do. Its audit
operator and reason are named here (``PRUNE_OPERATOR``, ``prune_reason``), so that a
delete or a later prune releases the holds a prune killed mid-way left
(``release_left_holds``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

from cpstore.errors import ConflictError, CpstoreError, GateError, NotFoundError
from cpstore.langgraph._codec import (
    CHANNEL,
    HASHED_RUN,
    channel_parts,
    load_checkpoint,
    load_metadata,
    run_ids_of,
    thread_runs,
)
from cpstore.langgraph._read import (
    Entry,
    StoredWrite,
    entry_key,
    load_parts,
    parent_loop,
    stored,
    stored_writes,
)
from cpstore.langgraph._write import Put, Writer, own_run
from cpstore.store import Store, retention
from cpstore.store.audit import AuditView
from cpstore.store.backend import Backend, Txn
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
from cpstore.store.model import MAX_KEY_BYTES, MAX_NAME_BYTES, ref_key, split_ref_key
from cpstore.store.reader import CheckpointView
from cpstore.store.retained import holds_on_runs

__all__ = ["copy_thread", "delete_for_runs", "delete_threads"]

#: The operator a keep_latest prune audits its resets and releases as.
PRUNE_OPERATOR = "cpstore.langgraph"


def prune_reason(thread_id: str) -> str:
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


def release_left_holds(store: Store, thread_id: str, runs: Iterable[str]) -> set[str]:
    """Release the holds a keep_latest prune of ``thread_id`` left on ``runs``; the runs
    it released one on.

    A prune resets each old branch away (``reset_ref``: a hold on its head, in the
    reset's txn) and releases that hold in the next txn. A prune killed between the two
    left the hold, and nothing released it: the next prune released only its own, a
    delete_thread swept around it, so the old head and its lineage (the values of a
    pruned, even of a deleted thread) stayed stored for good (review88,
    tests/test_review88_maintain_kill.py). A hold is the prune's when its audit record
    is a ``ref_reset`` to None of that head on that run by ``PRUNE_OPERATOR`` with this
    thread's ``prune_reason``; any other hold (an operator's) stands. One released
    meanwhile (a prune in flight, its own) is passed over.
    """
    wanted = set(runs)
    released: set[str] = set()
    if not wanted:
        return released
    reason = prune_reason(thread_id)
    # Only the rows naming the runs are decoded (holds_on_runs): every row was, per call.
    for head, hold in holds_on_runs(store.backend, wanted):
        try:
            rec = store.get_audit(hold["audit"])
        except CpstoreError:  # no such record, or a damaged log: not provably ours
            continue
        body = rec.body if isinstance(rec.body, dict) else {}
        if (
            rec.kind != "ref_reset"
            or body.get("operator") != PRUNE_OPERATOR
            or body.get("reason") != reason
            or body.get("new") is not None
            or body.get("old") != head
            or body.get("run") != hold["run"]
        ):
            continue
        try:
            store.release_retained(
                head, operator=PRUNE_OPERATOR, reason=reason, holder=hold["audit"]
            )
        except NotFoundError:
            continue
        released.add(hold["run"])
    return released


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
        # a killed keep_latest's holds on the runs would keep what their sweeps free:
        # released before the first (one read of the store's holds for all the runs)
        left = release_left_holds(store, thread_id, heads)
        for run in sorted(heads):
            writer.forget(run)
            if run in runs or heads[run] or run in left:  # no whole-store sweep without refs
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


def delete_for_runs(store: Store, writer: Writer, run_ids: Any) -> None:
    """Delete every entry (and its writes) whose metadata ``run_id`` is listed
    (``_codec.run_ids_of``: InvalidInputError before anything is deleted when an entry
    of ``run_ids`` is no run id)."""
    wanted = run_ids_of(run_ids)
    if not wanted:
        return
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
            if e.parent is None
            or e.parent == e.checkpoint_id  # its own parent (a retried put): recorded first
            or (e.ns, e.parent) not in ids
            or (e.ns, e.parent) in done
        ]
        if not ready:
            # A longer loop (re-puts): no order records it with steps that never go
            # backwards; refused before anything is copied (it failed part-way, lgsaver96).
            raise parent_loop(_in_loop(pending))
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
            # the target's own writes under this id (a run's put_writes that landed after
            # a delete_thread of the target, a run on an earlier copy): the copy holds the
            # source's writes, never the union (review70: a reset thread resumed as the
            # old run had answered); a key longer than a store key may be (an older
            # release's, PostgreSQL) cannot go in that txn, and stays
            stale = tuple(
                k for k, _ in scan(txn, meta, _writes_of(target, e)) if len(k) <= MAX_KEY_BYTES
            )
        _copy_one(store, writer, target, e, (parts, step, writes, stale))


def _in_loop(pending: list[Entry]) -> Entry:
    """An entry of a loop among ``pending``, none of which has its parent outside them."""
    at = {(e.ns, e.checkpoint_id): e for e in pending}
    e, seen = pending[0], set()
    while (e.ns, e.checkpoint_id) not in seen:
        seen.add((e.ns, e.checkpoint_id))
        e = at[e.ns, str(e.parent)]
    return e


def _writes_of(thread_id: str, e: Entry) -> bytes:
    """The prefix of the pending writes of ``e``'s checkpoint id under ``thread_id``."""
    return write_key(thread_id, e.ns, e.checkpoint_id, sized=False)


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
    read: tuple[dict[str, bytes], int, list[StoredWrite], tuple[bytes, ...]],
    *,
    expect: bytes | None = None,
) -> None:
    """Record ``e`` again on ``target``; ``read`` is its parts, step, the writes to give it
    and the keys of writes the target holds under its id (dropped)."""
    parts, step, writes, drop = read
    head = {k: parts[k] for k in ("checkpoint", "metadata")}
    versions, values = _decoded(writer, e, parts)
    records = []
    for w in writes:
        key = write_key(target, e.ns, e.checkpoint_id, w.task_id, w.idx)
        body = [w.task_path, w.task_id, w.idx, w.channel, w.typed[0], w.typed[1]]
        records.append((key, pack(key, body)))
    written = {k for k, _ in records}
    # The writes go in the checkpoint's own txn, with the target's own writes under this
    # id dropped there: the copied checkpoint never shows writes that are not the
    # source's, not even between two txns (review70).
    in_txn = (*((k, None) for k in drop if k not in written), *records)
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
            records=in_txn,
        )
    )
    if not records:
        return
    # Recorded with its writes in one txn; deleted or pruned from the target since (another
    # process), they went together: the copy is not whole, and says so.
    backend = store.backend
    with backend.read_txn() as txn:
        gone = txn.get(entry_key(target, e.ns, e.checkpoint_id), db=backend.db("meta")) is None
    if gone:
        raise ConflictError(
            "the target thread changed during the copy (a checkpoint the copy recorded "
            "was deleted or pruned, with its writes, before the copy went on)",
            where=f"thread {target!r} checkpoint {e.checkpoint_id}",
            expected="the checkpoint the copy recorded",
            got="no index entry",
        )
