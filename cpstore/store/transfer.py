"""push / pull: copy what one store has and another lacks, between any two backends.

:func:`transfer` copies the runs of ``source`` (all, or one) into ``dest``:

1. In one read txn of the source, every ref of the runs and each head's
   lineage (back to the run's first checkpoint or a pruned one).
2. In one read txn of the destination, which of those checkpoints it lacks;
   only what they reach (state parts, chunk indexes and chunks, logs and the
   payloads they name, token records) is asked for, and only the objects
   the destination lacks are copied.
3. Objects, in batches (``batch_objects`` / ``batch_bytes``): read from the
   source hash-checked, hashed again at the receiver (bytes that do not
   match their digest are an :class:`IntegrityError` and nothing of the
   batch is written), written once each.
4. Per branch, one destination write txn: the checkpoints it lacks (oldest
   first, each manifest hashed against its id, each object it reaches
   checked present), the tombstone of a pruned parent, sealed-ledger
   entries, then the ref by compare-and-set against the head read in step 2:
   created, or moved forward when the destination's head is an ancestor of
   the source's; a destination branch that went elsewhere is a
   :class:`ConflictError` naming it (the other branches still move).
   Objects the destination's gc swept since step 3 (a checkpoint it removed
   named them too) are found before anything is written: the txn rolls back
   and they are sent again inside the next landing txn (at most
   ``MAX_RESENDS`` rounds, then a :class:`ConflictError` naming the race).

   Objects the *source's* retention swept after step 1 (the checkpoints
   naming them pruned meanwhile) are a :class:`ConflictError` naming that
   race; an object missing while a checkpoint reaching it stands is an
   :class:`IntegrityError` (:func:`~cpstore.store.transfer_objects._fetch_checked`).

A batched ``dest`` handle's queued checkpoints are committed before step 3, once every
refusal has been made (review99: blind to them, a landing moved a branch one extends and
the handle's next flush dropped its whole batch). A batched ``source`` handle's are
committed before step 1 reads its refs (review100: a head the handle returned was sent
at its committed parent, a run it queued whole was "no such run"); a commit that fails
is raised with a note, nothing copied.

Either store's refs table failing its checks (a ref's own, or ``meta/refs_digest``: a
ref vanished, was added or changed outside cpstore) is an :class:`IntegrityError`
before anything is copied (:func:`vouch_refs`: the destination before step 1 and again
with the heads of step 4's compare-and-set, the source in step 1's txn): a push must not
recreate a vanished ref over a true head it cannot see, nor carry a ref it cannot vouch
for (docs/store.md, "push and pull").

A killed transfer leaves objects without checkpoints (step 3) but never a
ref or checkpoint that names a missing object: the next transfer skips the
objects already there and finishes. A second transfer copies nothing.
The audit log is per store and is not copied, except that each landing txn
appends the source's standing non-ACCEPT decision of the branch's checkpoints
(``cpstore.store.transfer_gates``: the destination's gates refuse what the
source's do); a destination log that cannot take them (keyed, no key) is a
:class:`StoreError` before anything is copied (docs/store.md, "push and pull").
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from cpstore.errors import ConflictError, IntegrityError, NotFoundError
from cpstore.native.binding import digest, digest_small
from cpstore.store.backend import Backend, Txn
from cpstore.store.batch_fates import commit_queue_first
from cpstore.store.content import Content, objects_of, records_of
from cpstore.store.manifest import (
    check_manifest_state,
    digests_in_map_order,
    manifest_references,
)
from cpstore.store.model import split_checkpoint_value, split_ref_key
from cpstore.store.objects import put_object
from cpstore.store.ref_table import refs_damage
from cpstore.store.refs import REFS_DIGEST_KEY, read_ref, unpack_ref, write_ref
from cpstore.store.store_identity import check_distinct
from cpstore.store.transfer_gates import Carried, carried_decisions, check_carry, land_decisions
from cpstore.store.transfer_objects import TransferReport, _copy_objects, _present, _resend
from cpstore.store.verify import child_kind, children

__all__ = ["TransferReport", "transfer", "vouch_refs"]

#: Objects per copy batch, and bytes per batch (whichever is reached first).
BATCH_OBJECTS = 512
BATCH_BYTES = 8 << 20
#: Rounds of re-sending objects the destination's gc swept before a branch landed.
MAX_RESENDS = 3
#: Re-sent bytes written inside the landing txn, in batches of ``batch_bytes``.
CARRY_BATCHES = 8


@dataclass
class _Branch:
    key: bytes
    head: bytes
    origin: int
    lineage: list[bytes]  # newest first, every stored checkpoint back to the root
    pruned_root: bytes | None  # the parent the walk stopped at, pruned in the source


def _branches(src: Backend, txn: Txn[memoryview], run_id: str | None) -> list[_Branch]:
    refs = src.db("refs")
    prefix = None if run_id is None else run_id.encode("utf-8", "surrogatepass") + b"\0"
    found: list[tuple[bytes, bytes, int]] = []
    with txn.cursor(db=refs) as cur:
        rows: Iterable[tuple[bytes, Any]] = []
        if prefix is None:
            rows = cur
        elif cur.set_range(prefix):
            rows = _prefixed(cur, prefix)
        for k, v in rows:
            key = bytes(k)
            found.append((key, *unpack_ref(key, v)))
    out = []
    for key, head, origin in found:
        lineage: list[bytes] = []
        cid: bytes | None = head
        pruned_root: bytes | None = None
        while cid is not None:
            if not records_of(src.dbs).exists(txn, cid):
                if txn.get(cid, db=src.db("tombstones")) is not None:
                    pruned_root = cid
                    break
                run, branch = split_ref_key(key)
                raise IntegrityError(
                    "the source store lacks a checkpoint of this branch's history",
                    where=f"refs/{run}/{branch}",
                    expected=cid.hex(),
                )
            lineage.append(cid)
            m = src.load_manifest(txn, cid, verify=True)
            cid = None if m.parent is None else bytes.fromhex(m.parent)
        out.append(_Branch(key, head, origin, lineage, pruned_root))
    return out


def vouch_refs(store: Backend, txn: Txn[memoryview], side: str) -> None:
    """IntegrityError unless every ref of ``store`` passes its check and the table its
    digest, in ``txn`` (the one the refs acted on are read in). A destination failing it
    may have lost the very ref a push would create (the true head on another lineage:
    no divergence would be seen) or hold one put back to an older head (it would be moved
    on from there); a source failing it would carry such refs. The digest cannot say
    which ref is damaged, so no ref of either store moves (review: push69)."""
    if store.layout_in(txn) < 2:
        return  # a layout-1 store (read-only) has no checks: docs/security.md
    damage = refs_damage(txn, store.dbs)
    if damage is None:
        return
    # Short: the first 300 characters (the chaos log's) must still name ``where``.
    raise IntegrityError(
        f"the {side} store's refs fail their checks ({damage.what}): push and pull move no "
        "ref; verify names the damage, repair_ref mends it",
        where=damage.where,
        expected=damage.expected,
        got=damage.got,
    ) from damage


def _prefixed(cur: Any, prefix: bytes) -> Iterable[tuple[bytes, Any]]:
    """Rows of a cursor set at ``prefix``, while their keys start with it."""
    while bytes(cur.key()).startswith(prefix):
        yield bytes(cur.key()), cur.value()
        if not cur.next():
            return


def _reach(src: Backend, txn: Txn[memoryview], cids: list[bytes]) -> list[bytes]:
    """Every object the checkpoints ``cids`` reach, each once, in a stable order."""
    objects = objects_of(src.dbs)
    out: dict[bytes, None] = {}
    expanded: set[tuple[bytes, str]] = set()
    for cid in cids:
        m = src.load_manifest(txn, cid, verify=True)
        for name, key in manifest_references(m.raw):
            out[bytes(key)] = None
            kind = child_kind(name)
            if kind is not None and (bytes(key), kind) not in expanded:
                expanded.add((bytes(key), kind))
                for child in children(txn, objects, name, bytes(key)):
                    out[bytes(child)] = None
    return list(out)


def _manifest(value: bytes | memoryview | None, cid: bytes) -> bytes:
    return b"" if value is None else bytes(split_checkpoint_value(value, cid)[1])


def _hints(txn: Txn[memoryview], objects: Content, value: bytes, cid: bytes) -> bytes:
    """A landing record's location hints, as the recorder's commit writes them
    (content.py): the heap seqs of its state parts, b"" off the heap or for a
    chunked or bytes state. ``value`` was checked against ``cid`` on arrival."""
    if objects.heap is None:
        return b""
    state = check_manifest_state(cid, split_checkpoint_value(value, cid)[1])["state"]
    parts = state["parts"] if state["kind"] == "parts" and not state.get("chunked") else None
    return objects.locations(txn, digests_in_map_order(parts)) if parts else b""


class _ObjectsSweptError(Exception):
    """A landing txn found objects it needs gone (the destination's gc): rolls it back."""

    def __init__(self, keys: list[bytes]) -> None:
        super().__init__(f"{len(keys)} object(s) missing")
        self.keys = keys


def _land_branch(
    src: Backend,
    dst: Backend,
    branch: _Branch,
    *,
    values: dict[bytes, bytes],
    reach: dict[bytes, list[bytes]],
    ledgers: dict[bytes, bytes],
    tombstone: bytes | None,
    expected: tuple[bytes, int] | None,
    report: TransferReport,
    carry_bytes: int,
    decisions: Carried,
) -> str:
    """One write txn: missing checkpoints, then the ref by compare-and-set. Returns the outcome.

    Objects copied (or found present) in step 3 that the destination's gc swept
    before this txn (a checkpoint it removed named them too) are found here,
    before anything is written:
    the txn is rolled back, those objects are fetched again (hash-checked) and
    written *in the next landing txn itself* (up to ``carry_bytes``; beyond it
    in txns of their own), so a gc cannot sweep them again in between. After
    ``MAX_RESENDS`` such rounds the branch is a :class:`ConflictError` naming the
    race; nothing of it landed.
    """
    # Raw table handles for PostgreSQL's prefetch; every read and write goes through content.py.
    cps, objects = dst.db("checkpoints"), dst.db("objects")
    records, contents = records_of(dst.dbs), objects_of(dst.dbs)
    lineage = set(branch.lineage)
    carry: dict[bytes, bytes] = {}

    def gated(txn: Txn[memoryview]) -> int:
        """The source's standing non-ACCEPT decisions of the stored lineage, in this txn."""
        pair = split_ref_key(branch.key)
        return land_decisions(src, dst, txn, reversed(branch.lineage), decisions, pair=pair)

    def land(txn: Txn[memoryview]) -> tuple[str, int, int]:
        landing = [c for c in branch.lineage if c in values]
        prefetch = getattr(txn, "prefetch", None)
        if prefetch is not None:  # PostgreSQL: what this txn reads, in one round trip
            prefetch(
                {
                    dst.db("refs"): [branch.key],
                    dst.db("meta"): [REFS_DIGEST_KEY],
                    cps: [*landing, branch.head, *([root] if (root := branch.pruned_root) else [])],
                    dst.db("tombstones"): landing,
                    dst.db("ledgers"): list(ledgers),
                },
                exists={objects: [k for c in landing for k in reach[c]]},
            )
        has = getattr(txn, "has", None)
        current = read_ref(txn, dst.dbs, branch.key, layout=dst.layout)
        if current != expected:
            run, name = split_ref_key(branch.key)
            raise ConflictError(
                "the destination branch moved during the transfer",
                where=f"refs/{run}/{name}",
                expected=None if expected is None else expected[0].hex(),
                got=None if current is None else current[0].hex(),
            )
        if current is not None and current[0] == branch.head:
            return "unchanged", 0, gated(txn)
        if current is not None and current[0] not in lineage:
            # No checkpoint written (none lands without its ref); the decisions of
            # those the destination holds still are.
            return "diverged", 0, gated(txn)
        for key, data in carry.items():  # re-sent: swept since step 3
            put_object(txn, contents, key, data)
        swept = [
            key
            for cid in landing
            for key in reach[cid]
            if not (has(key, db=objects) if has else contents.stored(txn, key))
        ]
        if swept:
            raise _ObjectsSweptError(list(dict.fromkeys(swept)))
        written = 0
        for cid in reversed(branch.lineage):  # oldest first: parents before children
            value = values.get(cid)
            if value is None:
                continue
            if records.add(txn, cid, value, _hints(txn, contents, value, cid)):
                written += 1
            elif _manifest(records.get(txn, cid), cid) != _manifest(value, cid):
                raise IntegrityError(
                    "different manifest stored under this checkpoint id",
                    where=f"checkpoints/{cid.hex()}",
                )
            txn.delete(cid, db=dst.db("tombstones"))
        if not records.exists(txn, branch.head):
            # Stored when step 2 looked, so not copied; pruned since (the
            # destination's own gc): a ref here would name a missing checkpoint.
            run, name = split_ref_key(branch.key)
            raise ConflictError(
                "the destination pruned this branch's head during the transfer; run it again",
                where=f"refs/{run}/{name}",
                expected=branch.head.hex(),
                got="pruned" if txn.get(branch.head, db=dst.db("tombstones")) else "missing",
            )
        root = branch.pruned_root
        if tombstone is not None and root is not None and not records.exists(txn, root):
            txn.put(root, tombstone, overwrite=False, db=dst.db("tombstones"))
        for key, sealer in ledgers.items():
            if sealer in lineage:
                txn.put(key, sealer, overwrite=False, db=dst.db("ledgers"))
        write_ref(txn, dst.dbs, branch.key, branch.head, branch.origin, old=current)
        return ("moved" if current is not None else "created"), written, gated(txn)

    for resends in itertools.count():
        try:
            outcome, written, carried = dst.write_txn(land)
        except _ObjectsSweptError as gone:
            if resends >= MAX_RESENDS:
                run, name = split_ref_key(branch.key)
                raise ConflictError(
                    "the destination's gc swept objects this transfer copied before the "
                    f"checkpoints naming them could land (re-sent {MAX_RESENDS} times); "
                    "nothing of this branch landed: run the transfer again",
                    where=f"refs/{run}/{name}",
                    expected="every object the landing checkpoints reach",
                    got=f"{len(gone.keys)} swept, first {gone.keys[0].hex()}",
                ) from None
            _resend(src, dst, gone.keys, reach, carry=carry, carry_bytes=carry_bytes, report=report)
            continue
        report.checkpoints += written
        report.decisions += carried
        return outcome
    raise AssertionError("unreachable")  # pragma: no cover


def transfer(
    source: Backend,
    dest: Backend,
    *,
    run_id: str | None = None,
    batch_objects: int = BATCH_OBJECTS,
    batch_bytes: int = BATCH_BYTES,
) -> TransferReport:
    """Copy the runs of ``source`` (or run ``run_id``) that ``dest`` lacks; see the module doc.

    ``source`` and ``dest`` one store, however spelled (two URLs of one database schema,
    two paths of one LMDB folder), is :class:`~cpstore.errors.SameStoreError`
    (an :class:`~cpstore.errors.InvalidInputError`) before anything is copied or written."""
    started = time.perf_counter()
    report = TransferReport()
    source.live()
    dest.live()
    check_distinct(source, dest)  # by what the stores are, not how they are spelled
    with dest.read_txn() as txn:
        vouch_refs(dest, txn, "destination")  # before anything is copied
    # A batched source's queue is not in the store read below: a head the handle returned
    # was sent at its committed parent, a queued run was "no such run" (review100).
    commit_queue_first(source, "the sending handle's", "the transfer", "nothing was copied")
    with source.read_txn() as txn:
        vouch_refs(source, txn, "source")  # in the txn its refs are read in
        branches = _branches(source, txn, run_id)
        if run_id is not None and not branches:
            raise NotFoundError("no such run in the source store", where="refs", got=run_id)
        every = list(dict.fromkeys(c for b in branches for c in b.lineage))
        have = _present(dest, "checkpoints", every)
        missing = [c for c in every if c not in have]
        src_records = records_of(source.dbs)
        values = {c: bytes(src_records.get(txn, c) or b"") for c in missing}
        for cid, value in values.items():
            _, data = split_checkpoint_value(value, cid)
            if digest_small(data) != cid:  # the receiver checks each manifest against its id
                raise IntegrityError(
                    "a checkpoint arrived whose manifest does not match its id",
                    where=f"checkpoints/{cid.hex()}",
                    expected=cid.hex(),
                    got=digest(data).hex(),
                )
        reach = {c: _reach(source, txn, [c]) for c in missing}
        effects = {
            bytes(m.raw["effects"])
            for c in missing
            if (m := source.load_manifest(txn, c, verify=False)).raw.get("effects") is not None
        }
        ledgers = {}
        for key in effects:
            sealer = txn.get(key, db=source.db("ledgers"))
            if sealer is not None:
                ledgers[key] = bytes(sealer)
        tombs = {}
        for b in branches:
            if b.pruned_root is not None:
                tomb = txn.get(b.pruned_root, db=source.db("tombstones"))
                if tomb is not None:
                    tombs[b.pruned_root] = bytes(tomb)
        pairs = [split_ref_key(b.key) for b in branches]
        decisions = carried_decisions(source, txn, every, pairs)
    check_carry(dest, decisions)  # before anything is copied
    # every refusal above changed nothing; the heads are read below (review99)
    commit_queue_first(dest, "the receiving handle's", "the transfer", "nothing was copied")
    needed = list(dict.fromkeys(k for c in missing for k in reach[c]))
    stored = _present(dest, "objects", needed)
    _copy_objects(
        source,
        dest,
        [k for k in needed if k not in stored],
        report,
        (batch_objects, batch_bytes),
        reach=reach,
    )
    with dest.read_txn() as txn:
        # Again with the heads the landing compare-and-sets against, so a ref that vanished
        # or changed while objects were copied is refused here; after this txn, the CAS
        # finds such a ref moved (ConflictError).
        vouch_refs(dest, txn, "destination")
        expected = {b.key: read_ref(txn, dest.dbs, b.key, layout=dest.layout) for b in branches}
    changed: list[ConflictError] = []  # branches the destination changed meanwhile
    for b in branches:
        mine = {c: values[c] for c in b.lineage if c in values}
        try:
            outcome = _land_branch(
                source,
                dest,
                b,
                values=mine,
                reach=reach,
                ledgers=ledgers,
                tombstone=None if b.pruned_root is None else tombs.get(b.pruned_root),
                expected=expected[b.key],
                report=report,
                carry_bytes=CARRY_BATCHES * batch_bytes,
                decisions=decisions,
            )
        except ConflictError as exc:
            if not str(exc.where or "").startswith("refs/"):
                raise  # the source's retention swept what was being copied: nothing more lands
            # The destination's own doing (its writer moved the branch, its gc pruned the
            # head or swept the objects again and again): this branch landed nothing, and
            # the others still land, as for a branch that went elsewhere.
            run, name = split_ref_key(b.key)
            report.conflicts.append(f"{run}/{name}")
            changed.append(exc)
            continue
        if outcome in ("created", "moved"):
            # Landed: a checkpoint shared with a later branch lands once. A
            # diverged branch landed nothing, so a later one must still carry it.
            for c in mine:
                values.pop(c, None)
        if outcome == "diverged":
            run, name = split_ref_key(b.key)
            report.conflicts.append(f"{run}/{name}")
        elif outcome == "created":
            report.refs_created += 1
        elif outcome == "moved":
            report.refs_moved += 1
        else:
            report.refs_unchanged += 1
    report.seconds = time.perf_counter() - started
    if len(report.conflicts) == 1 and changed:
        raise changed[0]  # the one branch, as its landing said it (the others landed)
    if report.conflicts:
        raise ConflictError(
            "destination branches went elsewhere than the source's, or changed during the "
            "transfer (not moved; the other branches were copied; run it again for those "
            "that changed)",
            where="refs",
            got=[*report.conflicts, *(f"{e.where}: {e.what}" for e in changed)],
        )
    return report
