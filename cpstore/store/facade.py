"""The store: content-addressed objects, checkpoints, refs and the audit log on LMDB.

``cpstore.open(path)`` returns a :class:`Store`. Layout, manifest format and
retention rules are in docs/store.md; what each durability mode can lose in a
crash, and the fork/thread rules, are in docs/durability.md.
"""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from cpstore.decision.gates import ResumePermit, check_resume
from cpstore.errors import InvalidInputError, StoreClosedError
from cpstore.native.binding import digest
from cpstore.native.records import Digest
from cpstore.store.at_exit import EXIT_WAIT, flush_collected, track_store
from cpstore.store.backend import StoreSpace, Txn
from cpstore.store.batch_fates import commit_queue_first
from cpstore.store.branches import (
    branches,
    head_of,
    history,
    reset_ref,
    runs,
    set_ref,
)
from cpstore.store.content import objects_of
from cpstore.store.facade_upkeep import StoreUpkeep
from cpstore.store.history import HistoryEntry, history_states
from cpstore.store.ids import resolve
from cpstore.store.lmdb_backend import DURABILITY_MODES, Durability, LmdbBackend
from cpstore.store.location import check_store_path, is_store_url
from cpstore.store.manifest import Manifest
from cpstore.store.model import (
    AuditRecord,
    as_payload,
    check_name,
    parse_id,
    ref_key,
)
from cpstore.store.objects import as_digest
from cpstore.store.objects import put_object as put_stored_object
from cpstore.store.reader import CheckpointView
from cpstore.store.recorder import Recorder
from cpstore.store.ref_repair import repair_ref, vanished_refs
from cpstore.store.refs import pinned_key
from cpstore.store.retained import release_retained, release_retained_by, retained
from cpstore.store.url_backend import postgres_backend

if TYPE_CHECKING:
    from cpstore.store.pg_backend import PgBackend

__all__ = ["Durability", "Store", "open"]

_DEFAULT_MAP = 1 << 30
_DEFAULT_MAX_MAP = 1 << 40
#: Seconds the exit flush waits for other threads' reads before a map growth.
_EXIT_RESIZE_WAIT = EXIT_WAIT
#: Recorder -> the store that made it: a recorder keeps its store alive, so the store's
#: finalizer and the exit hook still flush what the recorder queued after the caller
#: dropped the store (before, ``rec = cpstore.open(p, durability="batched").recorder(r)``
#: lost every checkpoint ``rec`` queued, without a word, at exit).
_MADE_BY: weakref.WeakKeyDictionary[Recorder, Store] = weakref.WeakKeyDictionary()


class Store(StoreUpkeep):  # the audit and maintenance calls: facade_upkeep.py
    """An open cpstore store; use as a context manager or call :meth:`close`.

    The facade: it checks arguments and composes the recorder, the reader,
    the audit log, verify, retention and the ref operations over one
    :class:`~cpstore.store.backend.Backend` (LMDB today, :attr:`backend`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        durability: Durability = "sync",
        readonly: bool = False,
        create: bool = True,
        map_size: int = _DEFAULT_MAP,
        max_map_size: int = _DEFAULT_MAX_MAP,
        batch_size: int = 64,
        audit_key: bytes | None = None,
    ) -> None:
        if not isinstance(durability, str) or durability not in DURABILITY_MODES:
            raise InvalidInputError(
                "unknown durability mode", expected=list(DURABILITY_MODES), got=durability
            )
        for name, value in (
            ("map_size", map_size),
            ("max_map_size", max_map_size),
            ("batch_size", batch_size),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InvalidInputError(f"{name} must be a positive int", got=value)
        if max_map_size < map_size:
            raise InvalidInputError(
                "max_map_size must be at least map_size",
                expected=f">= {map_size}",
                got=max_map_size,
            )
        self._backend: LmdbBackend | PgBackend
        if is_store_url(path):  # map sizes are LMDB's: the server manages its own space
            self._backend = postgres_backend(
                str(path), durability=durability, readonly=readonly, create=create,
                batch_size=batch_size, audit_key=audit_key,
            )  # fmt: skip
            track_store(self)
            return
        self._backend = LmdbBackend(
            os.fspath(path),
            durability=durability,
            readonly=readonly,
            create=create,
            map_size=map_size,
            max_map_size=max_map_size,
            batch_size=batch_size,
            audit_key=audit_key,
        )
        track_store(self)

    # -- lifecycle -----------------------------------------------------------

    @property
    def backend(self) -> Any:
        """The storage backend this store composes (the seam: docs/architecture.md): an
        LmdbBackend or a PgBackend, typed ``Any`` so code reaching into one needs no cast."""
        return self._backend

    @property
    def path(self) -> str:
        """The store directory."""
        return self._backend.path

    @property
    def durability(self) -> Durability:
        """The durability mode this handle was opened with."""
        return self._backend.durability

    @property
    def readonly(self) -> bool:
        """True when opened read-only."""
        return self._backend.readonly

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        # An error leaving the block flushes too: every queued checkpoint is
        # complete, and the last ones before a failure are what recovery needs.
        self.close()

    def close(self) -> None:
        """Flush queued checkpoints (batched mode) and release the environment.

        On LMDB, when another thread of this process is still inside a transaction of the
        store after 5 s (waiting for the writer lock another process holds, a read view
        kept open), the handle is closed but the environment is left open, and
        StoreError "... was left open" is raised: closing it under that transaction could
        crash the process (docs/durability.md)."""
        self._backend.close()

    def flush_at_exit(self) -> None:
        """Commit queued checkpoints at interpreter exit (in the opening process only).

        Never hangs: a map growth waits at most ``_EXIT_RESIZE_WAIT`` seconds
        for reads of other threads; a failed flush is a RuntimeWarning naming
        every checkpoint not written.
        """
        self._backend.flush_at_exit(_EXIT_RESIZE_WAIT)

    def __del__(self) -> None:
        # A batched store dropped without close() still owes its queued
        # checkpoints: their ids were returned. Flush, and say close() was missed.
        # Never nested in a write txn of the same store the collector interrupted,
        # nor waiting on another thread of this process: a helper thread then flushes
        # once that write ends (at_exit.flush_collected; a failure names every id).
        backend = getattr(self, "_backend", None)
        if backend is None or not backend.owes_flush():
            return
        count = backend.pending
        how = (
            "flushed"
            if flush_collected(backend)
            else "a helper thread flushes (this thread was inside a txn of the store or "
            "another thread uses it)"
        )
        warnings.warn(
            f"cpstore store {backend.path} garbage-collected without close(); "
            f"{how} {count} queued checkpoint(s)",
            ResourceWarning,
            stacklevel=2,
        )

    def disk_bytes(self) -> int:
        """Bytes of the data file that hold pages (what a copy would need)."""
        return self._backend.disk_bytes()

    def space(self) -> StoreSpace:
        """The data file's size, bytes in use and bytes free for reuse (after a gc)."""
        return self._backend.space()

    # -- objects -------------------------------------------------------------

    def put_object(self, data: bytes) -> Digest:
        """Store ``data`` under its digest (write-once), pinned, and return the raw digest.

        The object is a retention root: ``prune`` and ``delete_run`` keep it
        even when a swept checkpoint named the same bytes, until
        :meth:`unpin_object`.
        """
        payload = as_payload(data, "object")
        key = digest(payload)
        backend = self._backend
        objects, meta = objects_of(backend.dbs), backend.db("meta")

        def put(txn: Txn[memoryview]) -> None:
            put_stored_object(txn, objects, key, payload)
            txn.put(pinned_key(key), b"", db=meta)

        backend.write_txn(put)
        return key

    def unpin_object(self, digest: bytes | str) -> bool:
        """Stop keeping an object :meth:`put_object` stored; False if it was not pinned.

        The object stays until a later ``prune`` or ``delete_run`` sweeps a
        checkpoint that names it (an object no checkpoint names is never swept).
        """
        key = as_digest(digest)
        meta = self._backend.db("meta")
        result: bool = self._backend.write_txn(
            lambda txn: bool(txn.delete(pinned_key(key), db=meta))
        )
        return result

    def get_object(self, digest: bytes | str, *, verify: bool = True) -> bytes:
        """The bytes stored under ``digest`` (raw or hex), hash-checked unless ``verify=False``."""
        return self._backend.get_objects([as_digest(digest)], verify=verify)[0]

    def has_object(self, digest: bytes | str) -> bool:
        """True when an object is stored under ``digest`` (its location followed as a read
        follows it: a damaged one raises IntegrityError naming it, never True)."""
        key = as_digest(digest)
        with self._backend.read_txn() as txn:
            return objects_of(self._backend.dbs).stored(txn, key)

    # -- checkpoints ---------------------------------------------------------

    def recorder(
        self,
        run_id: str,
        *,
        branch: str = "main",
        parent: str | None = None,
        permit: ResumePermit | str | None = None,
    ) -> Recorder:
        """A recorder for ``run_id``/``branch``.

        On an existing branch it continues from the head (its logs, ledger and
        token numbering); ``parent`` may only name that head (ConflictError
        otherwise: fork a new branch instead). On a new branch, ``parent`` (a
        checkpoint id) forks from that checkpoint, and None starts a new run.
        A head another writer moves away (and retention sweeps) as it is read
        is ConflictError too: ask again.

        Continuing from a checkpoint whose standing decision (the latest one
        recorded about it) is not ACCEPT needs ``permit``, the
        :class:`ResumePermit` :func:`resume_gate` gave for it; GateError
        otherwise. A permit is checked against the audit log and used once.
        """
        self._backend.live()
        run_id, branch = check_name(run_id, "run_id"), check_name(branch, "branch")
        rec = Recorder(self._backend, run_id, branch, parent)
        _MADE_BY[rec] = self
        check_resume(self, rec.head, run_id=run_id, branch=branch, permit=permit)
        return rec

    def resolve(self, name: str) -> str:
        """The checkpoint id ``name`` names: a full id, a unique prefix of >= 8 hex
        characters, ``RUN@BRANCH`` or ``RUN@BRANCH~N`` (docs/store.md, "Naming checkpoints")."""
        self._refuse_closed()
        return resolve(self._backend, name)

    def manifest(self, checkpoint_id: str, *, verify: bool = True) -> Manifest:
        """The manifest of a checkpoint."""
        cid = parse_id(checkpoint_id)
        with self._backend.read_txn() as txn:
            return self._backend.load_manifest(txn, cid, verify=verify)

    def read(self, checkpoint_id: str, *, verify: bool = True) -> CheckpointView:
        """A reader over one checkpoint: ``with store.read(id) as cp: ...``.

        Entering begins one read txn and reads the manifest, hash-checked
        against the id (``verify=False`` skips every hash check of the
        reader); views it hands out die with the block.
        """
        cid = parse_id(checkpoint_id)
        self._refuse_closed()
        return CheckpointView(self._backend, cid, verify)  # the pid is checked on entry

    def latest(self, run_id: str, branch: str = "main", *, verify: bool = True) -> CheckpointView:
        """A reader over the head of ``run_id``/``branch``: ``with store.latest(run) as cp``.

        The ref and the checkpoint are read in the same txn, so the head
        cannot move in between. NotFoundError when the branch does not exist;
        IntegrityError when it is absent while a ref row beside its key fails its check
        (as :meth:`ref`).
        """
        key = ref_key(check_name(run_id, "run_id"), check_name(branch, "branch"))
        self._refuse_closed()
        return CheckpointView(self._backend, None, verify=verify, head=(key, run_id, branch))

    def _refuse_closed(self) -> None:
        if self._backend.closed:
            raise StoreClosedError(where=self.path)

    def flush(self) -> None:
        """Commit every queued checkpoint in one durable txn (batched mode).

        On failure (e.g. a ref conflict) the whole batch is rolled back and dropped;
        interrupted before its commit (KeyboardInterrupt, a signal handler's exception or
        ``sys.exit()``), it goes back on the queue. ReentrantWriteError from a signal
        handler running inside a write of this store on the same thread.
        With ``durability="none"``, fsync every checkpoint committed so far (one
        fsync of the data file): the point from which an OS crash loses nothing.
        After :meth:`close` (which flushed, and left nothing queued) it returns, on
        every backend; it still raises what another thread's failed commit dropped.
        """
        self._backend.flush()

    @property
    def pending(self) -> int:
        """Checkpoints queued but not yet committed (always 0 in sync and none modes)."""
        return self._backend.pending

    # -- refs ----------------------------------------------------------------

    def ref(self, run_id: str, branch: str = "main") -> str | None:
        """The head checkpoint id of ``run_id``/``branch``, or None when there is none.

        IntegrityError when the ref fails its check or its target's, and when it is absent
        while a ref row beside its key fails its check: that row's key may be this ref's,
        damaged (docs/store.md, "Refs, branches, listing"; not every such flip is seen)."""
        return head_of(self._backend, run_id, branch)

    def set_ref(self, run_id: str, branch: str, new: str, *, expected_old: str | None) -> None:
        """Compare-and-set a head: move it to ``new`` if it is ``expected_old``.

        Only forward: ``new`` must descend from the current head (or the
        branch must not exist yet), else :class:`NotDescendantError`; moving
        a branch elsewhere or deleting it (``new=None``) is :meth:`reset_ref`,
        which is audited and keeps the old history until it is released.
        Creating the branch (``expected_old=None``), like every write that creates a
        ref, is :class:`IntegrityError` while the refs table holds fewer refs than its
        digest counts (a ref vanished outside cpstore), or holds refs while its digest
        row is missing (the count unknown; docs/store.md). On a batched handle, first
        commits its queued checkpoints (docs/store.md, "Refs, branches, listing"): a
        queued id may be set.
        """
        set_ref(
            self._backend,
            run_id,
            branch,
            new,
            expected_old=expected_old,
            first=self._queue_first("the set_ref", "no ref was written"),
        )

    def reset_ref(
        self,
        run_id: str,
        branch: str,
        new: str | None,
        *,
        expected_old: str | None,
        operator: str,
        reason: str,
    ) -> AuditRecord:
        """Move a head anywhere in its run (or delete it, ``new=None``), audited.

        In one write txn: the CAS on ``expected_old``, a ``ref_reset`` audit
        record naming the operator and reason, and the old head kept as a
        retention root (its whole history survives ``prune``): a hold of this
        record's, beside any other on that checkpoint, until :meth:`release_retained`
        lets it go. Returns the audit record. On a batched handle, first commits its
        queued checkpoints (docs/store.md, "Refs, branches, listing").
        """
        return reset_ref(
            self._backend,
            run_id,
            branch,
            new,
            expected_old=expected_old,
            operator=operator,
            reason=reason,
            first=self._queue_first("the reset_ref", "no ref was moved"),
        )

    def _queue_first(self, before: str, nothing: str) -> Callable[[], None]:
        """What a ref write (set_ref, fork, reset_ref) runs once its arguments passed their
        checks: commit this handle's queued checkpoints. Blind to them, a reset or set_ref
        moved a branch a queued checkpoint extends and the next flush dropped the whole
        batch, other runs' returned ids too; a fork or set_ref of a queued id was
        NotFoundError (review100). A commit that fails is raised as the flush raised it,
        with a note that the write did not run. Not :meth:`repair_ref` (a repair is what
        lets a queue on a damaged or vanished ref commit) nor the releases (they move no
        ref; a sweep commits the queue itself)."""
        return lambda: commit_queue_first(self._backend, "this handle's", before, nothing)

    def repair_ref(
        self,
        run_id: str,
        branch: str,
        new: str | None,
        *,
        operator: str,
        reason: str,
        force: bool = False,
    ) -> AuditRecord:
        """Replace, delete (``new=None``) or put back a damaged or vanished ref, audited.

        The repair path for a damaged ref (which blocks ``prune`` and every
        CAS), a damaged refs digest and a ref that vanished (put back at ``new``):
        ConflictError unless the stored ref fails its check, the refs table fails
        ``meta/refs_digest`` or the ref's row sits under a damaged key too (deleted,
        ``moved_from``, its head kept); NotFoundError for an absent ref when the table passes
        its digest (``fork`` makes a branch) or ``new`` is None. A ref put back while
        the table is exactly one ref short of its digest must be the ref that vanished
        (name and head): PutBackMismatchError otherwise, naming it when it can be found,
        nothing written; so is a repair of an intact ref (moved, deleted or at its own
        head) while that ref is missing. ``force=True`` accepts either (the record's
        ``forced``, and ``overrode``: the vanished ref the refusal named). The
        audit record carries the damaged bytes (None for a ref put back); a checkpoint
        they still name is kept as a retained head, and so is what the repaired table
        no longer reaches that a vanished or changed ref may have held (``kept``).
        See docs/store.md, "Repairing a damaged ref".
        """
        return repair_ref(
            self._backend, run_id, branch, new, operator=operator, reason=reason, force=force
        )

    def vanished_refs(self) -> list[dict[str, str]]:
        """The refs the refs table is missing (each ``{"run", "branch", "head"}``), which
        :meth:`repair_ref` puts back, when ``meta/refs_digest`` names them (one or two
        refs short, found among the stored checkpoints); empty when none vanished or the
        digest cannot say which. Read-only (``cpstore verify`` prints the repairs)."""
        return vanished_refs(self._backend)

    def retained(self) -> dict[str, dict[str, Any]]:
        """Heads kept by :meth:`reset_ref` or :meth:`repair_ref`: id -> ``{"run", "branch",
        "audit", "holds"}``: ``holds`` every hold (``{"run", "branch", "audit"}``, the
        audit record keeping it), oldest first; the other three the oldest hold's."""
        return retained(self._backend)

    def release_retained(
        self, checkpoint_id: str, *, operator: str, reason: str, holder: str | None = None
    ) -> AuditRecord:
        """Release one hold on a retained head; audited (``retained_release``: its
        ``holder`` and ``holders_left``). ``holder`` (an audit digest) must name the
        hold when several audit records hold the checkpoint (SeveralHoldersError lists
        them). The next prune may sweep it once no hold is left."""
        return release_retained(
            self._backend, checkpoint_id, operator=operator, reason=reason, holder=holder
        )

    def release_retained_by(
        self, audit_digest: str, *, operator: str, reason: str
    ) -> list[AuditRecord]:
        """Release every hold one audit record made (a ``ref_repair``'s ``retained`` and
        ``kept``, a ``ref_reset``'s old head), in one txn, one ``retained_release``
        record each; another record's hold on the same checkpoint stands.
        NotFoundError when that record holds none. The next prune may sweep them."""
        return release_retained_by(self._backend, audit_digest, operator=operator, reason=reason)

    def fork(self, run_id: str, branch: str, checkpoint_id: str) -> None:
        """Create ``branch`` of ``run_id`` at ``checkpoint_id``; ConflictError if it exists.

        IntegrityError while the refs table is short of its digest's count, as for every
        create (:meth:`set_ref`). On a batched handle, first commits its queued checkpoints
        (docs/store.md, "Refs, branches, listing"): a queued id may be forked."""
        set_ref(
            self._backend,
            run_id,
            branch,
            checkpoint_id,
            expected_old=None,
            first=self._queue_first("the fork", "no branch was created"),
        )

    def runs(self, *, limit: int | None = None) -> list[str]:
        """Run ids that have at least one ref, in sorted order."""
        return runs(self._backend, limit=limit)

    def branches(self, run_id: str) -> dict[str, str]:
        """Branch name -> head checkpoint id for ``run_id``."""
        return branches(self._backend, run_id)

    def history(
        self, run_id: str, branch: str = "main", *, limit: int | None = None, verify: bool = True
    ) -> list[Manifest]:
        """Manifests from the head of ``branch`` back through parents, newest first.

        The walk stops at ``limit``, at a run's first checkpoint or at a pruned one.
        """
        return history(self._backend, run_id, branch, limit=limit, verify=verify)

    def history_states(
        self, run_id: str, branch: str = "main", *, limit: int | None = None, verify: bool = True
    ) -> list[HistoryEntry]:
        """:meth:`history` with each checkpoint's state: ``entry.manifest``, ``entry.state``.

        One read txn for the whole walk (a consistent snapshot while writers
        move the head); every state is read, hash-checked and decoded as
        ``store.read(id).state()`` reads it. A damaged state object or manifest
        state raises :class:`IntegrityError` naming it and its checkpoint; the
        other manifest fields and the created_at check are checked when
        ``entry.manifest`` is first used (as ``CheckpointView.manifest``).
        """
        return history_states(self._backend, run_id, branch, limit=limit, verify=verify)


def open(
    path: str | os.PathLike[str],
    *,
    durability: Durability = "sync",
    readonly: bool = False,
    create: bool = True,
    map_size: int = _DEFAULT_MAP,
    max_map_size: int = _DEFAULT_MAX_MAP,
    batch_size: int = 64,
    audit_key: bytes | None = None,
) -> Store:
    """Open the store at ``path``, or make a new one there; see :class:`Store`.

    A new store is made only when ``create`` is true (the default), the open
    is not ``readonly`` and ``path`` is missing or an empty directory;
    anything else that is not a cpstore store (an empty or foreign data.mdb;
    a folder of other files when a store could be made there) raises
    :class:`FormatVersionError` naming the path, and a missing store (a
    folder of other files too) opened with ``create=False`` or ``readonly``
    raises :class:`NotFoundError`. An empty path, or a regular file or a path
    through one, is :class:`InvalidInputError` (the table: docs/store.md,
    "Opening"). A ``readonly`` open of a store whose
    folder this user cannot write works without LMDB's lock file
    (docs/store.md, "Read-only opens").

    ``durability`` is ``"sync"`` (every checkpoint fsynced before it is
    acknowledged), ``"batched"`` (queued in this process, committed durably
    ``batch_size`` at a time) or ``"none"`` (committed at once, never fsynced
    by cpstore: a process crash loses nothing, an OS crash may lose the last
    commits); what each can lose is in docs/durability.md. In one process,
    every writable handle of a path has the same fsync behaviour.

    ``audit_key`` (16 to 64 bytes, kept outside the store) makes the audit log
    and sign-offs tamper-evident with keyed MACs (docs/security.md).
    """
    path = check_store_path(path)
    return Store(
        path,
        durability=durability,
        readonly=readonly,
        create=create,
        map_size=map_size,
        max_map_size=max_map_size,
        batch_size=batch_size,
        audit_key=audit_key,
    )
