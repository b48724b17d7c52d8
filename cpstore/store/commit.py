"""One checkpoint write applied on a write txn: the commit rule every backend shares.

The ref compare-and-set, the parent's presence, the objects (write-once), the
named objects' presence, the checkpoint (write-once), its tombstone cleared,
the sealed ledger, the ref, and the ``meta`` records written with the
checkpoint (``CheckpointWrite.extra_meta``: the LangGraph index), all in the
caller's txn. Backends differ only in how they ask whether an object exists
(``exists``: LMDB reads it, PostgreSQL asks its prefetched existence set).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Set
from typing import Any

from cpstore.errors import ConflictError, IntegrityError
from cpstore.store.backend import Txn
from cpstore.store.model import CheckpointWrite, hex_id, ref_key, unpack_checkpoint_value
from cpstore.store.objects import put_object
from cpstore.store.refs import RECORDED, read_ref_hashed, write_ref

__all__ = ["apply_write", "objects_to_check"]


def apply_write(
    txn: Txn[memoryview],
    dbs: Mapping[str, Any],
    op: CheckpointWrite,
    *,
    layout: int,
    exists: Callable[[bytes], bool],
) -> None:
    """Apply ``op`` in ``txn`` (``dbs``: named table -> handle), or raise and write nothing
    the caller commits (ConflictError on a moved branch or a pruned parent)."""
    objects, cps = dbs["objects"], dbs["checkpoints"]
    rkey = ref_key(op.run_id, op.branch)
    current = read_ref_hashed(txn, dbs, rkey, layout=layout)
    current_b = None if current is None else current[0]
    if current_b != op.expected_ref:
        raise ConflictError(
            "the branch moved since this recorder read it",
            where=f"refs/{op.run_id}/{op.branch}",
            expected=hex_id(op.expected_ref),
            got=hex_id(current_b),
        )
    # Also a premise of the recorder's must_exist: with the CAS above it proves
    # the head this write extends is stored in this txn (recorder.checkpoint).
    if op.parent is not None and txn.get(op.parent, db=cps) is None:
        # Only a fork's first checkpoint can get here (a branch head is never
        # pruned): retention swept the checkpoint it forks from while the
        # recorder held it. Its history is gone, so refuse rather than write a
        # child whose parent (and inherited logs) are not stored.
        pruned = txn.get(op.parent, db=dbs["tombstones"]) is not None
        raise ConflictError(
            "the parent checkpoint was pruned while this recorder held it; "
            "fork from a stored checkpoint"
            if pruned
            else "parent checkpoint is not stored",
            where=f"refs/{op.run_id}/{op.branch}",
            expected=op.parent.hex(),
            got="pruned" if pruned else "missing",
        )
    for key, data in op.objects.items():
        put_object(txn, objects, key, data)
    for key in op.must_exist:
        if not exists(key):
            raise IntegrityError(
                "checkpoint references an object that is not stored",
                where=f"checkpoint {op.cid.hex()}",
                expected=bytes(key).hex(),
            )
    if not txn.put(op.cid, op.value, overwrite=False, db=cps):
        _, existing = unpack_checkpoint_value(txn.get(op.cid, db=cps) or b"")
        if existing != unpack_checkpoint_value(op.value)[1]:
            raise IntegrityError(
                "different manifest stored under this checkpoint id",
                where=f"checkpoints/{op.cid.hex()}",
            )
    txn.delete(op.cid, db=dbs["tombstones"])
    if op.sealed_ledger is not None:
        txn.put(op.sealed_ledger, op.cid, overwrite=False, db=dbs["ledgers"])
    write_ref(txn, dbs, rkey, op.cid, RECORDED, old=current)
    for mkey, mvalue in op.extra_meta:
        if mvalue is None:
            txn.delete(mkey, db=dbs["meta"])
        else:
            txn.put(mkey, mvalue, db=dbs["meta"])


def objects_to_check(
    named: Set[bytes],
    written: Collection[bytes],
    *,
    extends_head: bool,
    reached: tuple[Set[bytes], Set[bytes]],
    inherited: Set[bytes],
) -> list[bytes]:
    """The objects a checkpoint names that its commit txn must read (``must_exist``).

    Every object a checkpoint names and its txn does not write is stored when
    the checkpoint becomes visible; the txn reads it, or knows it without a read:

    * ``extends_head``: the write's ``expected_ref`` is set and equals its
      ``parent`` (the head H the recorder extends); :func:`apply_write` proves
      in the txn that the ref still names H (the CAS) and that H's checkpoint
      is stored (the parent read).
    * A stored checkpoint has every object it reaches stored: a commit writes
      or reads each one in the txn that stores it, and retention deletes an
      object only in the txn that deletes every checkpoint naming it (it marks
      the whole of every live checkpoint and deletes every checkpoint it does
      not mark: retention.py ``_sweep``). Nothing else deletes objects.
    * ``reached`` (the recorder's confirmed names and log payloads) is exactly
      what H reaches: its own names, chunk-tree nodes and logged payloads,
      built by the recorder that committed H or loaded verified from H.

    So those need no read. Without a head (a fork's first commit: its parent
    is no head, and may be pruned down to what other heads keep) every named
    and ``inherited`` object is read.
    """
    if not extends_head:
        return [k for k in named | inherited if k not in written]
    confirmed, logged = reached
    return [k for k in named if k not in written and k not in confirmed and k not in logged]
