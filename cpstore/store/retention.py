"""Retention: mark from every ref head and sealed ledger, sweep the rest; delete, prune.

Retention marks from every ref head (its whole lineage, or its newest
``keep_last`` checkpoints), from every head an audited reset retained, from
every sealed ledger and from every object ``put_object`` pinned, then sweeps
checkpoints and objects nothing marked; pruned checkpoint ids get a tombstone
so a surviving child's ``parent`` is known to be pruned, not lost. Audit records are never touched.

A checkpoint the audit log names (a decision about it, a sign-off or a gate
passage) is swept like any other when retention says so, but never silently:
the :class:`GcReport` lists it, and the sweep appends one ``gc`` audit record
naming every such checkpoint, in the sweep's own txn. Which removed checkpoints
the log names is asked of the audited-checkpoint index (``audit_named``), caught up
in the sweep's txn first: one lookup per removed checkpoint, not a read of the log.
``dry_run`` runs the whole sweep and rolls it back: the report says exactly what a
real run removes. A dry run on a log the audit indexes do not cover yet commits
their catch-up in a txn of its own first (only those cache rows change), so the
next dry run does not read the log again.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cpstore.errors import IntegrityError, InvalidInputError, NotFoundError
from cpstore.native.binding import digest, digest_small
from cpstore.native.canonical import encode_value
from cpstore.native.records import DIGEST_SIZE
from cpstore.store.audit import append_audit_txn, audited_among, catch_up_indexes, indexes_lag
from cpstore.store.backend import Backend, Txn
from cpstore.store.branches import branches
from cpstore.store.content import KIND_OBJECT, Content, objects_of, records_of
from cpstore.store.keyed_audit import check_can_append
from cpstore.store.manifest import Manifest, decode_manifest, manifest_references
from cpstore.store.model import check_name, split_ref_key, unpack_checkpoint_value
from cpstore.store.ref_table import checked_heads
from cpstore.store.refs import delete_ref, pinned_objects, unpack_ref
from cpstore.store.retained import retained, retained_heads
from cpstore.store.verify import child_kind, children

__all__ = ["AUDIT_GC", "GcReport", "check_gc_arguments", "delete_run", "gc", "prune", "sweep"]

#: Audit kind of the record a sweep leaves when it removes checkpoints the log names.
AUDIT_GC = "gc"


@dataclass(frozen=True)
class GcReport:
    """What a retention sweep removed (or, for a dry run, would remove)."""

    checkpoints: tuple[str, ...]
    """Ids of the checkpoints removed, sorted."""
    objects_removed: int
    """Objects removed (payloads, state parts, logs no kept checkpoint names)."""
    bytes_removed: int
    """Bytes of the removed objects and checkpoint entries (their values)."""
    decided: tuple[str, ...]
    """Removed checkpoints the audit log names (a decision, a sign-off or a gate)."""
    dry_run: bool
    """True when nothing was changed."""


class _DryRunDoneError(Exception):
    """Rolls a dry run's txn back, carrying its report out."""

    def __init__(self, report: GcReport) -> None:
        super().__init__("dry run")
        self.report = report


class _Watched(Content):
    """The objects, noting each one a walk fetched that is missing, unreadable or (a plain
    object: a chunk-tree root, node or upper spine, a log) does not hash to its key.
    The mark walk fetches only containers: each names what it keeps alive."""

    __slots__ = ("lost",)

    def __init__(self, dbs: Mapping[str, Any]) -> None:
        super().__init__(dbs, KIND_OBJECT)
        self.lost: list[bytes] = []

    def get(self, txn: Txn[memoryview], key: bytes) -> memoryview | None:
        try:
            value = super().get(txn, key)
        except IntegrityError:  # a damaged location
            self.lost.append(bytes(key))
            raise
        if value is None or (len(key) == DIGEST_SIZE and bytes(digest(value)) != bytes(key)):
            self.lost.append(bytes(key))
        return value


def _ref_where(key: bytes) -> str:
    run, branch = split_ref_key(key)
    return f"refs/{run}/{branch}"


def _lost(cid: bytes, where: str) -> IntegrityError:
    return IntegrityError(
        "a kept checkpoint's record is not stored (and no tombstone says it was pruned): "
        "the sweep stops, or the sound history under it would be swept (verify names it; "
        "reset_ref the branch to a stored checkpoint, release_retained a lost retained head)",
        where=where,
        expected=cid.hex(),
        got="missing",
    )


def _sweep(
    store: Backend,
    keep: Callable[[str], int | None],
    drop_run: str | None,
    *,
    dry_run: bool = False,
    operation: str = "gc",
    only_heads: Mapping[bytes, bytes] | None = None,
    keep_ref: Callable[[Txn[memoryview], bytes], bool] | None = None,
) -> GcReport:
    dbs = store.dbs
    objects, records = objects_of(dbs), records_of(dbs)
    now = store.now()

    def run(txn: Txn[memoryview]) -> GcReport:
        if drop_run is not None:
            prefix = drop_run.encode("utf-8", "surrogatepass") + b"\0"
            with txn.cursor(db=dbs["refs"]) as cur:
                doomed = [(bytes(k), bytes(v)) for k, v in cur if bytes(k).startswith(prefix)]
            for ref, stored in doomed:
                if only_heads is not None and unpack_ref(ref, stored)[0] != only_heads.get(ref):
                    continue  # moved or made since the caller looked: kept
                if keep_ref is not None and keep_ref(txn, ref):
                    continue  # the caller's condition, in this txn: kept
                delete_ref(txn, dbs, ref)
        live_cps: dict[bytes, Manifest] = {}
        # A ref that fails its check, or a refs table that fails its digest (a ref put
        # back to an older head outside cpstore), stops the sweep (IntegrityError):
        # sweeping by a damaged head could delete the history the true head reaches.
        heads: list[tuple[str | None, bytes, str]] = [
            (split_ref_key(k)[0], cid, _ref_where(k)) for k, cid in checked_heads(txn, dbs)
        ]
        # Heads an audited reset_ref moved away from: whole lineage, until released.
        heads.extend(
            (None, cid, f"meta/retained/{cid.hex()}") for cid in retained_heads(txn, dbs["meta"])
        )
        # Checkpoints whose whole lineage is marked: only an unlimited walk may
        # stop at one (a limited walk may have marked just its newest few).
        complete: set[bytes] = set()
        for run_id, head, named_by in heads:
            limit = None if run_id is None else keep(run_id)
            cid: bytes | None = head
            walked = 0
            while cid is not None and (limit is None or walked < limit):
                value = records.get(txn, cid)  # a damaged location stops the sweep
                if value is None:
                    if walked and txn.get(cid, db=dbs["tombstones"]) is not None:
                        break  # retention pruned the lineage here
                    # A lost record (a head, or a parent no tombstone explains): the sound
                    # ancestors under it would look unreachable and be swept.
                    raise _lost(cid, named_by if not walked else f"checkpoints/{cid.hex()}")
                walked += 1
                if limit is None:
                    if cid in complete:
                        break  # the rest of this lineage is already marked
                    complete.add(cid)
                if cid in live_cps:
                    m = live_cps[cid]
                else:
                    created, data = unpack_checkpoint_value(value, cid)
                    if digest_small(data) != cid:
                        # Its parent and references are not the checkpoint's: marking by
                        # them could sweep the sound lineage it really keeps.
                        raise IntegrityError(
                            "a kept checkpoint's manifest does not match its id: the sweep "
                            "stops (verify names it)",
                            where=f"checkpoints/{cid.hex()}",
                            expected=cid.hex(),
                            got=digest(data).hex(),
                        )
                    m = decode_manifest(cid, bytes(data), created)
                    live_cps[cid] = m
                cid = None if m.parent is None else bytes.fromhex(m.parent)
        # The same bytes can be a leaf in one role (a state part) and a log or
        # chunk index in another: "seen" must not stop the expansion of a role
        # that has children, so each (object, role kind) is expanded once.
        marked: set[bytes] = set()
        expanded: set[tuple[bytes, str]] = set()
        # Complete chunk-tree nodes never change: one walk marks what is under
        # each, however many roots share it (live roots are walked first, so a
        # node shared with a dead one keeps its chunks out of the candidates).
        tree_walked: set[bytes] = set()

        def mark(into: set[bytes], field: str, key: bytes, source: Content = objects) -> None:
            into.add(key)
            kind = child_kind(field)
            if kind is not None and (key, kind) not in expanded:
                expanded.add((key, kind))
                into.update(bytes(c) for c in children(txn, source, field, key, tree_walked))

        kept = _Watched(dbs)
        for m in live_cps.values():
            for field, key in manifest_references(m.raw):
                mark(marked, field, key, kept)
        with txn.cursor(db=dbs["ledgers"]) as cur:
            ledgers = [bytes(k) for k, _ in cur]
        for key in ledgers:
            mark(marked, "effects", key, kept)
        if kept.lost:
            # What a lost container names looks unreachable: the objects under it that
            # swept checkpoints name too (older chunks, shared payloads) would be swept.
            raise IntegrityError(
                "an object a kept checkpoint reaches through (a chunk-tree root, node or "
                "upper spine, or a log) is missing or damaged: the sweep stops, or what it "
                "names would be swept (verify names it)",
                where=f"objects/{kept.lost[0].hex()}",
                got=[k.hex() for k in dict.fromkeys(kept.lost)][:10],
            )
        for key in pinned_objects(txn, dbs["meta"]):
            marked.add(key)  # put_object's: the caller's until unpin_object
        # Only what a swept checkpoint named is a candidate: objects stored with
        # put_object and never referenced are the caller's, not garbage.
        candidates: set[bytes] = set()
        # A record whose location is damaged (None), or whose manifest does not hash
        # to its id, is left alone: verify names it. Its references are not the
        # checkpoint's, so sweeping by them could take another's objects and leak its own.
        dead: list[tuple[bytes, float, memoryview]] = []
        removed_bytes = 0
        for k, v in records.items(txn):
            if v is not None and k not in live_cps:
                try:
                    created, data = unpack_checkpoint_value(bytes(v))
                except IntegrityError:  # shorter than its header: it cannot hash either
                    continue
                if digest_small(data) == k:
                    dead.append((k, created, data))
                    removed_bytes += len(v)
        tomb = encode_value({"pruned_at": now})
        for cid, created, data in dead:
            for field, key in manifest_references(decode_manifest(cid, data, created).raw):
                # An (object, role) expanded while marking has only marked children.
                mark(candidates, field, key)
            records.delete(txn, cid)
            txn.put(cid, tomb, db=dbs["tombstones"])
        removed_objects = 0
        for key in candidates - marked:
            try:
                value = objects.get(txn, key)
            except IntegrityError:
                value = None  # its location names another entry: only the index row goes
            removed_bytes += 0 if value is None else len(value)
            # Counted only when there was an entry: one a swept record names but that
            # is missing already (damage, verify names it) was not removed by this sweep.
            removed_objects += objects.delete(txn, key)
        ids = tuple(sorted(cid.hex() for cid, _, _ in dead))
        named: set[bytes] = set()
        if ids:
            # Catch-up first (records an older cpstore appended), then one lookup
            # per removed checkpoint: the log is not read (it once was, per checkpoint).
            catch_up_indexes(store, txn)
            named = audited_among(store, txn, (cid for cid, _, _ in dead))
        decided = tuple(c for c in ids if bytes.fromhex(c) in named)
        report = GcReport(ids, removed_objects, removed_bytes, decided, dry_run)
        if dry_run:
            if decided:
                # The real run appends a gc record, which a keyed log takes only with
                # the key: it would refuse, and the dry run says what it would do.
                check_can_append(store, txn)
            raise _DryRunDoneError(report)
        if decided:
            body = {
                "operation": operation,
                "checkpoints_removed": len(ids),
                "decided": list(decided),
            }
            append_audit_txn(store, txn, AUDIT_GC, body, float(now))
        return report

    if dry_run and indexes_lag(store):
        # The dry run's txn rolls back: the catch-up (one read of the uncovered log)
        # commits on its own first, so repeated dry runs do not repeat it. It changes
        # only the audit indexes, which the next append would bring up to date anyway.
        store.write_txn(lambda txn: catch_up_indexes(store, txn))
    try:
        result: GcReport = store.write_txn(run)
    except _DryRunDoneError as done:
        return done.report
    return result


def sweep(
    store: Backend,
    *,
    keep_last: int | None = None,
    run_id: str | None = None,
    delete_run: str | None = None,
    dry_run: bool = False,
    only_heads: Mapping[bytes, bytes] | None = None,
    keep_ref: Callable[[Txn[memoryview], bytes], bool] | None = None,
) -> GcReport:
    """Delete the run ``delete_run``, or keep each branch's newest ``keep_last`` (of
    ``run_id`` or all runs); sweep everything unreachable; report it (module docstring).

    ``only_heads`` (with ``delete_run``): ref key -> head; only a ref whose head is still
    the one given is dropped, in the sweep's own txn (a branch moved or made since the
    caller looked, by a put it raced, is kept with what it reaches). ``keep_ref`` (with
    ``delete_run``): ``keep_ref(txn, ref key)`` true keeps that ref, asked in the sweep's
    txn (a head can be the same checkpoint again: recorded anew from the same parts on
    the same run and branch name)."""
    if delete_run is not None:
        return _sweep(
            store,
            lambda _run: None,
            delete_run,
            dry_run=dry_run,
            operation="delete-run",
            only_heads=only_heads,
            keep_ref=keep_ref,
        )
    limit = keep_last

    def keep(run: str) -> int | None:
        return limit if run_id is None or run == run_id else None

    return _sweep(store, keep, None, dry_run=dry_run, operation="prune")


def delete_run(
    store: Backend,
    run_id: str,
    only_heads: Mapping[bytes, bytes] | None = None,
    keep_ref: Callable[[Txn[memoryview], bytes], bool] | None = None,
) -> int:
    """Drop every ref of ``run_id`` (of those, only the ones still at ``only_heads`` and
    not kept by ``keep_ref``: :func:`sweep`), then sweep everything unreachable."""
    report = sweep(store, delete_run=run_id, only_heads=only_heads, keep_ref=keep_ref)
    return len(report.checkpoints)


def prune(store: Backend, *, keep_last: int, run_id: str | None) -> int:
    """Keep each branch's newest ``keep_last`` checkpoints (of ``run_id`` or all runs)."""
    return len(sweep(store, keep_last=keep_last, run_id=run_id).checkpoints)


def check_gc_arguments(
    keep_last: int | None, run_id: str | None, drop_run: str | None, dry_run: bool
) -> str | None:
    """InvalidInputError unless exactly one of ``keep_last`` and ``drop_run`` is given, each
    well-formed; returns the run named (checked), if any. Asked before anything is written
    (a batched handle's queue is committed before a sweep: review98)."""
    if (keep_last is None) == (drop_run is None):
        raise InvalidInputError("give exactly one of keep_last and delete_run")
    if drop_run is not None and run_id is not None:
        # run_id says which run keep_last prunes: beside delete_run it would be dropped
        # unread, and a typo of which run to delete go unnoticed.
        raise InvalidInputError(
            "run_id (--run) goes with keep_last (--keep-last), not with delete_run",
            got={"delete_run": drop_run, "run_id": run_id},
        )
    if not isinstance(dry_run, bool):
        raise InvalidInputError("dry_run must be a bool", got=dry_run)
    if keep_last is not None and (
        not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 1
    ):
        raise InvalidInputError("keep_last must be an int >= 1", got=keep_last)
    named = drop_run if drop_run is not None else run_id
    return None if named is None else check_name(named, "run_id")


def gc(
    store: Backend,
    keep_last: int | None,
    run_id: str | None,
    drop_run: str | None,
    dry_run: bool,
) -> GcReport:
    """:func:`sweep` with its arguments checked (:func:`check_gc_arguments`); a run named
    that has no refs is NotFoundError (a typo must not look like "nothing to remove")."""
    named = check_gc_arguments(keep_last, run_id, drop_run, dry_run)
    if named is not None and not branches(store, named):
        # Any hold of the run's (review69: the oldest hold's run only, so a repair's
        # hold on another run's checkpoint went uncounted; `cpstore retained --run`
        # lists it).
        kept = sum(
            1
            for head in retained(store).values()
            if head["run"] == named or any(h["run"] == named for h in head["holds"])
        )
        raise NotFoundError(
            "no such run (it has no refs)"
            + (
                f"; {kept} retained head(s) of it keep its history (`cpstore retained "
                "--run`, Store.retained(); release them to let gc sweep it)"
                if kept
                else ""
            ),
            where=named,
        )
    if drop_run is not None:
        return sweep(store, delete_run=named, dry_run=dry_run)
    return sweep(store, keep_last=keep_last, run_id=named, dry_run=dry_run)
