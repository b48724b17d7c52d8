"""One checkpoint write applied on a write txn: the commit rule every backend shares.

The ref compare-and-set, the parent's presence, the objects (write-once), the
named objects' presence, the checkpoint (write-once), its tombstone cleared,
the sealed ledger, the ref, and the ``meta`` records written with the
checkpoint (``CheckpointWrite.extra_meta``: the LangGraph index), all in the
caller's txn. Backends differ only in how they ask whether an object exists
(``exists``: LMDB reads it, PostgreSQL asks its prefetched existence set).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence, Set
from typing import Any

from cpstore.errors import CommitLostError, ConflictError, CpstoreError, IntegrityError
from cpstore.store.backend import Txn
from cpstore.store.content import Content, appended_hint, objects_of, records_of
from cpstore.store.model import CheckpointWrite, hex_id, ref_key, unpack_checkpoint_value
from cpstore.store.objects import put_object
from cpstore.store.refs import RECORDED, commit_ref, read_ref_hashed

__all__ = ["TxnChecked", "apply_write", "apply_writes", "landed", "objects_to_check"]


class TxnChecked:
    """What one write txn has already checked or written itself, for the later writes of
    the same txn (a batch, a group): object key -> its 4-byte location hint, for each key
    whose location that txn followed to a heap entry carrying its kind and key or that it
    appended itself; and the checkpoint records that txn added. Nothing a commit writes
    moves an existing index row or heap entry, and LMDB has one writer, so what the txn
    checked still holds until it ends. Made per txn attempt (a retried txn starts with a
    new one), held by the one thread applying that txn, never kept past it: not a cache.
    """

    __slots__ = ("hints", "records")

    def __init__(self) -> None:
        self.hints: dict[bytes, bytes] = {}
        self.records: set[bytes] = set()


def apply_writes(
    txn: Txn[memoryview],
    dbs: Mapping[str, Any],
    ops: Sequence[CheckpointWrite],
    *,
    layout: int,
    contents: tuple[Content, Content],
) -> None:
    """Apply ``ops`` in order in ``txn`` (:func:`apply_write` each, an object's location
    read once per txn: :class:`TxnChecked`); a damaged location refuses as it does alone."""
    checked = TxnChecked() if len(ops) > 1 else None
    for op in ops:  # exists None: the objects' Content.stored (a damaged location refuses)
        apply_write(txn, dbs, op, layout=layout, exists=None, contents=contents, checked=checked)


def apply_write(
    txn: Txn[memoryview],
    dbs: Mapping[str, Any],
    op: CheckpointWrite,
    *,
    layout: int,
    exists: Callable[[bytes], bool] | None,
    contents: tuple[Content, Content] | None = None,
    checked: TxnChecked | None = None,
) -> None:
    """Apply ``op`` in ``txn`` (``dbs``: named table -> handle), or raise and write nothing
    the caller commits (ConflictError on a moved branch or a pruned parent).
    ``exists``: whether an object is stored (None: the objects' :meth:`Content.stored`).
    ``contents``: (objects, records) of ``dbs`` when the caller keeps them; ``checked``:
    what earlier writes of this same txn checked (:class:`TxnChecked`), kept up to date."""
    objects, cps = (objects_of(dbs), records_of(dbs)) if contents is None else contents
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
    if (
        op.parent is not None
        and (checked is None or op.parent not in checked.records)  # added by this txn
        and not cps.stored(txn, op.parent)  # location checked
    ):
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
    for mkey, want in op.meta_expected:
        got = txn.get(mkey, db=dbs["meta"])
        if got is None or bytes(got) != want:
            raise ConflictError(
                "a meta record this checkpoint replaces changed since it was read",
                where=f"meta/{mkey!r}",
                expected="the record read",
                got="missing" if got is None else "another record",
            )
    for key, data in op.objects.items():
        if put_object(txn, objects, key, data) and checked is not None:
            hint = appended_hint(txn, objects.heap)  # appended by this txn just now: its location
            if hint is not None:
                checked.hints[key] = hint
    # The hints' location reads also answer the must-exist reads of the same keys
    # (checked as Content.stored checks them: a damaged location is not "found").
    indexed: set[bytes] = set()
    hints = (
        objects.locations(txn, op.hint_keys, indexed, None if checked is None else checked.hints)
        if op.hint_keys and cps.heap is not None
        else b""
    )
    # One C-level subset test when the location reads answered every must-exist key.
    for key in () if indexed.issuperset(op.must_exist) else op.must_exist:
        if key not in indexed and not (objects.stored(txn, key) if exists is None else exists(key)):
            raise IntegrityError(
                "checkpoint references an object that is not stored",
                where=f"checkpoint {op.cid.hex()}",
                expected=bytes(key).hex(),
            )
    if cps.add(txn, op.cid, op.value, hints):
        if checked is not None:
            checked.records.add(op.cid)
    else:
        _, existing = unpack_checkpoint_value(cps.get(txn, op.cid) or b"")
        if existing != unpack_checkpoint_value(op.value)[1]:
            raise IntegrityError(
                "different manifest stored under this checkpoint id",
                where=f"checkpoints/{op.cid.hex()}",
            )
    txn.delete(op.cid, b"", dbs["tombstones"])  # positional: every engine's delete takes it
    if op.sealed_ledger is not None:
        txn.put(op.sealed_ledger, op.cid, overwrite=False, db=dbs["ledgers"])
    commit_ref(txn, dbs, rkey, op.cid, RECORDED, old=current)  # write_ref, origin unchecked
    if op.extra_meta:  # positional, as the Txn protocol has them: ~1k instructions each
        meta = dbs["meta"]
        for mkey, mvalue in op.extra_meta:
            if mvalue is None:
                txn.delete(mkey, b"", meta)
            else:
                txn.put(mkey, mvalue, True, True, False, meta)


def objects_to_check(
    named: set[bytes], written: Collection[bytes], *, inherited: Set[bytes]
) -> list[bytes]:
    """The objects a checkpoint names that its commit txn must read (``must_exist``).

    Every object a checkpoint names or inherits and its txn does not write is
    read in that txn, so nothing acknowledged can name an object that is not
    stored when the checkpoint becomes visible -- whatever ran before, in any
    process, and also when the store was damaged behind cpstore's back (the
    commit is refused with IntegrityError instead of acknowledging a checkpoint
    no read could serve). "Names" is the manifest's own references: the nodes
    and frames under a chunk-tree root this recorder's head already reaches are
    not read again (append_state.py: a checkpoint costs what was appended), so
    a frame of the head's tree deleted behind cpstore's back goes unnoticed by
    the next commit, whose read then fails as the head's does (audit35: verify
    names the frame; retention stops on a lost node, never on a lost frame).
    Skipping what the extended head reaches saved ~2-3 us of a ~45 us put and
    would rest on a store-wide invariant (only retention deletes objects) that a
    later maintenance path could silently break.
    """
    checked = named | inherited if inherited else named
    return list(checked.difference(written))  # set operations in C: named less written


def settle_by_reading(
    exc: Exception,
    verdict: Callable[[], bool | None],
    engine: tuple[type[Exception], ...] = (),
) -> bool:
    """After a txn was applied and its commit reported ``exc``: True when the store shows
    it committed (``verdict``, which reads the store and returns :func:`landed`'s answer;
    the caller then returns: nothing to retry), ``exc``'s own class raised saying "not
    stored" when it shows it did not, False when it cannot tell (the store unreadable
    too: the caller raises its own "may or may not").

    In the main thread an exception of ``verdict`` that is neither a cpstore error nor
    one of ``engine`` (the backend's raw errors) is a signal handler's (a watchdog's
    TimeoutError) landing in the read: raised, never taken for an unreadable store (it
    was, and lost), as a KeyboardInterrupt there always was; the caller's handling of
    an interrupt settles the write (batch_fates.interrupted). Other threads run no
    signal handlers: there it is the read's failure."""
    try:
        found = verdict()
    except Exception as err:  # e.g. LMDB's fatal state, a server still unreachable
        if not isinstance(err, (CpstoreError, *engine)) and (
            threading.current_thread() is threading.main_thread()
        ):
            raise
        found = None
    if found:
        return True
    if found is False and isinstance(exc, CpstoreError):
        what = f"{exc.what}; the commit wrote nothing: not stored"
        if isinstance(exc, CommitLostError):
            # stored=False: batch_owners relays it as "not stored", not "may or may not"
            raise CommitLostError(
                what, where=exc.where, expected=exc.expected, got=exc.got, stored=False
            ) from exc
        raise type(exc)(what, where=exc.where, expected=exc.expected, got=exc.got) from exc
    return False


def landed(
    ops: Sequence[CheckpointWrite],
    head: Callable[[bytes], bytes | None],
    stored: Callable[[bytes], bool],
    pruned: Callable[[bytes], bool],
) -> bool | None:
    """Whether the txn that applied ``ops`` (all or nothing) and then reported an error
    committed, as the store now shows it (``head``: ref key -> the checkpoint it names;
    ``stored``: whether a checkpoint record is stored; ``pruned``: whether gc left its
    tombstone): True (committed), False (not committed), None (cannot tell).

    Each branch the txn moves votes: at the txn's last checkpoint on it, committed;
    still at the head its first checkpoint on it expected and that last checkpoint not
    stored, not committed; anywhere else (another writer moved it since), no vote. No
    vote, or votes that disagree (another writer stored the very same checkpoint id, or
    reset a branch), is None. A branch found at the checkpoint id holds that checkpoint
    whoever wrote it. A head back at the expected id beside a stored checkpoint is no
    vote: another writer may have reset (or deleted) the branch after the txn committed
    (ABA), and "not committed" would have it committed a second time over that reset.
    Committed also needs every checkpoint of ``ops`` stored (all or nothing): a branch at
    its checkpoint id may be another writer's twin of it (same id), while a branch that
    abstains (moved on) may hold nothing of the txn; a checkpoint not stored then makes
    the verdict None (not stored, or committed and swept after a reset: cannot tell).
    A checkpoint of ``ops`` with a tombstone was stored once (this txn's, reset away and
    swept by gc, or a twin's): no branch votes "not committed" then.
    """
    first: dict[bytes, CheckpointWrite] = {}
    last: dict[bytes, CheckpointWrite] = {}
    for op in ops:
        key = ref_key(op.run_id, op.branch)
        first.setdefault(key, op)
        last[key] = op
    votes: set[bool] = set()
    swept = any(pruned(op.cid) for op in ops)
    for key, op in last.items():
        now = head(key)
        if now == op.cid:
            votes.add(True)
        elif now == first[key].expected_ref and not stored(op.cid) and not swept:
            votes.add(False)
    if votes == {True} and not all(stored(op.cid) for op in ops):
        return None
    return votes.pop() if len(votes) == 1 else None
