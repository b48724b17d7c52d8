"""Retention: mark from every ref head and sealed ledger, sweep the rest; delete, prune.

Retention marks from every ref head (its whole lineage, or its newest
``keep_last`` checkpoints), from every head an audited reset retained, from
every sealed ledger and from every object ``put_object`` pinned, then sweeps
checkpoints and objects nothing marked; pruned checkpoint ids get a tombstone
so a surviving child's ``parent`` is known to be pruned, not lost. Audit records are never touched.
"""

from __future__ import annotations

from collections.abc import Callable

from cpstore.native.canonical import encode_value
from cpstore.store.backend import Backend, Txn
from cpstore.store.manifest import Manifest, decode_manifest, manifest_references
from cpstore.store.model import split_ref_key, unpack_checkpoint_value
from cpstore.store.refs import delete_ref, pinned_objects, retained_heads, unpack_ref
from cpstore.store.verify import child_kind, children

__all__ = ["delete_run", "prune"]


def _sweep(store: Backend, keep: Callable[[str], int | None], drop_run: str | None) -> int:
    dbs = store.dbs
    objects = dbs["objects"]
    now = store.now()

    def run(txn: Txn[memoryview]) -> int:
        if drop_run is not None:
            prefix = drop_run.encode("utf-8", "surrogatepass") + b"\0"
            with txn.cursor(db=dbs["refs"]) as cur:
                doomed = [bytes(k) for k, _ in cur if bytes(k).startswith(prefix)]
            for key in doomed:
                delete_ref(txn, dbs, key)
        live_cps: dict[bytes, Manifest] = {}
        with txn.cursor(db=dbs["refs"]) as cur:
            # A ref that fails its check stops the sweep (IntegrityError): sweeping
            # by a damaged head could delete the history the true head reaches.
            heads: list[tuple[str | None, bytes]] = [
                (split_ref_key(k)[0], unpack_ref(k, v)[0]) for k, v in cur
            ]
        # Heads an audited reset_ref moved away from: whole lineage, until released.
        heads.extend((None, cid) for cid in retained_heads(txn, dbs["meta"]))
        # Checkpoints whose whole lineage is marked: only an unlimited walk may
        # stop at one (a limited walk may have marked just its newest few).
        complete: set[bytes] = set()
        for run_id, head in heads:
            limit = None if run_id is None else keep(run_id)
            cid: bytes | None = head
            walked = 0
            while cid is not None and (limit is None or walked < limit):
                value = txn.get(cid, db=dbs["checkpoints"])
                if value is None:
                    break
                walked += 1
                if limit is None:
                    if cid in complete:
                        break  # the rest of this lineage is already marked
                    complete.add(cid)
                if cid in live_cps:
                    m = live_cps[cid]
                else:
                    created, data = unpack_checkpoint_value(value)
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

        def mark(into: set[bytes], field: str, key: bytes) -> None:
            into.add(key)
            kind = child_kind(field)
            if kind is not None and (key, kind) not in expanded:
                expanded.add((key, kind))
                into.update(bytes(c) for c in children(txn, objects, field, key, tree_walked))

        for m in live_cps.values():
            for field, key in manifest_references(m.raw):
                mark(marked, field, key)
        with txn.cursor(db=dbs["ledgers"]) as cur:
            ledgers = [bytes(k) for k, _ in cur]
        for key in ledgers:
            mark(marked, "effects", key)
        for key in pinned_objects(txn, dbs["meta"]):
            marked.add(key)  # put_object's: the caller's until unpin_object
        # Only what a swept checkpoint named is a candidate: objects stored with
        # put_object and never referenced are the caller's, not garbage.
        candidates: set[bytes] = set()
        with txn.cursor(db=dbs["checkpoints"]) as cur:
            dead = [(bytes(k), bytes(v)) for k, v in cur if bytes(k) not in live_cps]
        tomb = encode_value({"pruned_at": now})
        for cid, entry in dead:
            created, data = unpack_checkpoint_value(entry)
            for field, key in manifest_references(decode_manifest(cid, data, created).raw):
                # An (object, role) expanded while marking has only marked children.
                mark(candidates, field, key)
            txn.delete(cid, db=dbs["checkpoints"])
            txn.put(cid, tomb, db=dbs["tombstones"])
        for key in candidates - marked:
            txn.delete(key, db=objects)
        return len(dead)

    removed: int = store.write_txn(run)
    return removed


def delete_run(store: Backend, run_id: str) -> int:
    """Drop every ref of ``run_id``, then sweep everything unreachable."""
    return _sweep(store, lambda _run: None, run_id)


def prune(store: Backend, *, keep_last: int, run_id: str | None) -> int:
    """Keep each branch's newest ``keep_last`` checkpoints (of ``run_id`` or all runs)."""
    return _sweep(store, lambda run: keep_last if run_id is None or run == run_id else None, None)
