"""The store: content-addressed objects, checkpoints, refs and the audit log on LMDB.

``cpstore.open(path)`` returns a :class:`Store`. Layout, manifest format and
retention rules are in docs/store.md; what each durability mode can lose in a
crash, and the fork/thread rules, are in docs/durability.md.
"""

from __future__ import annotations

import os
import stat
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any, Literal

from ._args import check_text
from ._audit_mac import check_key
from ._canonical import encode_value
from ._errors import (
    AuditChainError,
    ConflictError,
    IntegrityError,
    InvalidInputError,
    NotDescendantError,
    NotFoundError,
    StoreError,
)
from ._gates import ResumePermit, check_resume
from ._native import digest, digest_small
from ._records import DIGEST_SIZE, Digest
from ._store_audit import append_audit, append_audit_txn, audit_records, get_audit
from ._store_env import (
    EnvOptions,
    Txn,
    acquire_env,
    as_digest,
    get_object,
    put_object,
    release_env,
)
from ._store_exit import track_store
from ._store_keyed import adopt_key, check_mac
from ._store_maint import check_checkpoint_objects, delete_run, prune, verify
from ._store_model import (
    AuditRecord,
    CheckpointWrite,
    Manifest,
    Problem,
    VerifyReport,
    as_payload,
    check_manifest,
    check_manifest_state,
    check_name,
    created_at_of,
    hex_id,
    manifest_from_raw,
    parse_id,
    ref_key,
    split_checkpoint_value,
    split_ref_key,
    unpack_checkpoint_value,
)
from ._store_reader import CheckpointView
from ._store_recorder import Recorder
from ._store_refs import (
    RECORDED,
    SET,
    check_ref_target,
    delete_ref,
    pinned_key,
    read_ref,
    replace_damaged_ref,
    retained_heads,
    retained_key,
    unpack_ref,
    write_ref,
)

__all__ = ["Durability", "Store", "open"]

#: ``"sync"``: every checkpoint is fsynced before the call returns.
#: ``"batched"``: checkpoints are queued and committed ``batch_size`` at a time.
Durability = Literal["sync", "batched"]

_DEFAULT_MAP = 1 << 30
_DEFAULT_MAX_MAP = 1 << 40
#: Seconds the exit flush waits for other threads' reads before a map growth.
_EXIT_RESIZE_WAIT = 5.0


def _lost_at_exit(path: str, queued: list[CheckpointWrite], exc: Exception) -> str:
    """The exit warning for a batch that could not be written: every lost id, by branch."""
    lost: dict[tuple[str, str], list[str]] = {}
    for op in queued:
        lost.setdefault((op.run_id, op.branch), []).append(bytes(op.cid).hex())
    named = "; ".join(
        f"run {run!r} branch {branch!r}: {', '.join(ids)}" for (run, branch), ids in lost.items()
    )
    return (
        f"cpstore store {path}: {len(queued)} queued checkpoint(s) were NOT written at "
        f"interpreter exit (batched mode acknowledged them as queued only): {named} ({exc})"
    )


class Store:
    """An open cpstore store; use as a context manager or call :meth:`close`."""

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
        if durability not in ("sync", "batched"):
            raise InvalidInputError(
                "unknown durability mode", expected=["sync", "batched"], got=durability
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
        self._path = os.fspath(path)
        self._durability: Durability = durability
        self._batch_size = batch_size
        self._pending: list[CheckpointWrite] = []
        self._pending_lock = threading.Lock()
        key = None if audit_key is None else check_key(audit_key)
        self._e = acquire_env(
            self._path, EnvOptions(bool(readonly), map_size, max_map_size, bool(create))
        )
        self._closed = False
        self._audit_key = key
        try:
            if key is None or readonly:
                with self._read() as txn:
                    self._audit_keyed = adopt_key(txn, self._e.dbs, key)
            else:
                self._audit_keyed = bool(
                    self._write(lambda txn: adopt_key(txn, self._e.dbs, key))
                )
        except BaseException:
            self.close()
            raise
        track_store(self)

    # -- lifecycle -----------------------------------------------------------

    @property
    def path(self) -> str:
        """The store directory."""
        return self._path

    @property
    def durability(self) -> Durability:
        """The durability mode this handle was opened with."""
        return self._durability

    @property
    def readonly(self) -> bool:
        """True when opened read-only."""
        return self._e.options.readonly

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Flush queued checkpoints (batched mode) and release the environment."""
        if self._closed:
            return
        try:
            if self._pending and os.getpid() == self._e.pid:
                self.flush()
        finally:
            self._closed = True
            release_env(self._e)

    def _flush_at_exit(self) -> None:
        """Commit queued checkpoints at interpreter exit (in the opening process only).

        Never hangs: a map growth waits at most ``_EXIT_RESIZE_WAIT`` seconds
        for reads of other threads (a daemon thread's read may never end). A
        flush that fails is a RuntimeWarning naming every checkpoint not written.
        """
        if self._closed or not self._pending or os.getpid() != self._e.pid:
            return
        queued = list(self._pending)
        self._e.resize_wait = _EXIT_RESIZE_WAIT
        try:
            self.flush()
        except Exception as exc:  # an exit hook must say what is lost, not raise
            warnings.warn(_lost_at_exit(self._path, queued, exc), RuntimeWarning, stacklevel=1)

    def __del__(self) -> None:
        # A batched store dropped without close() still owes its queued
        # checkpoints: their ids were returned. Flush, and say close() was missed.
        if getattr(self, "_closed", True) or not self._pending:
            return
        if os.getpid() != self._e.pid:
            return
        count = len(self._pending)
        self.flush()
        warnings.warn(
            f"cpstore store {self._path} garbage-collected without close(); "
            f"flushed {count} queued checkpoint(s)",
            ResourceWarning,
            stacklevel=2,
        )

    def _live(self) -> None:
        if self._closed:
            raise StoreError("the store is closed", where=self._path)
        self._e.check_pid()

    def _read(self) -> AbstractContextManager[Txn[memoryview]]:
        if self._closed:
            raise StoreError("the store is closed", where=self._path)
        return self._e.read()  # checks the pid

    def _write(self, fn: Callable[[Txn[memoryview]], Any]) -> Any:
        self._live()
        return self._e.write(fn)

    def _db(self, name: str) -> Any:
        return self._e.dbs[name]

    def disk_bytes(self) -> int:
        """Bytes of the data file that hold pages (what a copy would need)."""
        self._live()
        info = self._e.env.info()
        return int((info["last_pgno"] + 1) * self._e.env.stat()["psize"])

    # -- objects -------------------------------------------------------------

    def put_object(self, data: bytes) -> Digest:
        """Store ``data`` under its digest (write-once), pinned, and return the raw digest.

        The object is a retention root: ``prune`` and ``delete_run`` keep it
        even when a swept checkpoint named the same bytes, until
        :meth:`unpin_object`.
        """
        payload = as_payload(data, "object")
        key = digest(payload)
        objects, meta = self._db("objects"), self._db("meta")

        def put(txn: Txn[memoryview]) -> None:
            put_object(txn, objects, key, payload)
            txn.put(pinned_key(key), b"", db=meta)

        self._write(put)
        return key

    def unpin_object(self, digest: bytes | str) -> bool:
        """Stop keeping an object :meth:`put_object` stored; False if it was not pinned.

        The object stays until a later ``prune`` or ``delete_run`` sweeps a
        checkpoint that names it (an object no checkpoint names is never swept).
        """
        key = as_digest(digest)
        meta = self._db("meta")
        result: bool = self._write(lambda txn: bool(txn.delete(pinned_key(key), db=meta)))
        return result

    def get_object(self, digest: bytes | str, *, verify: bool = True) -> bytes:
        """The bytes stored under ``digest`` (raw or hex), hash-checked unless ``verify=False``."""
        key = as_digest(digest)
        with self._read() as txn:
            return bytes(
                get_object(
                    txn, self._db("objects"), key, verify=verify, where=f"objects/{key.hex()}"
                )
            )

    def has_object(self, digest: bytes | str) -> bool:
        """True when an object is stored under ``digest``."""
        key = as_digest(digest)
        with self._read() as txn:
            return txn.get(key, db=self._db("objects")) is not None

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

        Continuing from a checkpoint whose standing decision (the latest one
        recorded about it) is not ACCEPT needs ``permit``, the
        :class:`ResumePermit` :func:`resume_gate` gave for it; GateError
        otherwise. A permit is checked against the audit log and used once.
        """
        self._live()
        run_id, branch = check_name(run_id, "run_id"), check_name(branch, "branch")
        rec = Recorder(self, run_id, branch, parent)
        check_resume(self, rec.head, run_id=run_id, branch=branch, permit=permit)
        return rec

    def _load_manifest(self, txn: Txn[memoryview], cid: bytes, *, verify: bool) -> Manifest:
        raw, header = self._load_raw(txn, cid, verify=verify)
        return manifest_from_raw(cid, raw, created_at_of(header, cid if verify else None))

    def _load_raw(
        self, txn: Txn[memoryview], cid: bytes, *, verify: bool, full: bool = True
    ) -> tuple[dict[str, Any], bytes]:
        """(manifest map, 16-byte entry header) of a checkpoint, manifest hash-checked.

        ``full=False`` shape-checks only the version and the state (the
        reader checks the rest before it uses another field). The header's
        created_at check is :func:`created_at_of`'s, when created_at is used.
        """
        value = txn.get(cid, None, self._e.dbs["checkpoints"])
        if value is None:
            pruned = txn.get(cid, db=self._db("tombstones")) is not None
            raise NotFoundError(
                "checkpoint was pruned" if pruned else "no such checkpoint",
                where="checkpoints",
                got=cid.hex(),
            )
        header, data = split_checkpoint_value(value, cid)
        if verify and digest_small(data) != cid:
            raise IntegrityError(
                "manifest bytes do not match the checkpoint id",
                where=f"checkpoints/{cid.hex()}",
                expected=cid.hex(),
                got=digest(data).hex(),
            )
        return (check_manifest(cid, data) if full else check_manifest_state(cid, data)), header

    def manifest(self, checkpoint_id: str, *, verify: bool = True) -> Manifest:
        """The manifest of a checkpoint."""
        cid = parse_id(checkpoint_id)
        with self._read() as txn:
            return self._load_manifest(txn, cid, verify=verify)

    def read(self, checkpoint_id: str, *, verify: bool = True) -> CheckpointView:
        """A reader over one checkpoint: ``with store.read(id) as cp: ...``.

        Entering begins one read txn and reads the manifest, hash-checked
        against the id (``verify=False`` skips every hash check of the
        reader); views it hands out die with the block.
        """
        cid = parse_id(checkpoint_id)
        if self._closed:
            raise StoreError("the store is closed", where=self._path)
        return CheckpointView(self, cid, verify=verify)  # the pid is checked on entry

    def latest(self, run_id: str, branch: str = "main", *, verify: bool = True) -> CheckpointView:
        """A reader over the head of ``run_id``/``branch``: ``with store.latest(run) as cp``.

        The ref and the checkpoint are read in the same txn, so the head
        cannot move in between. NotFoundError when the branch does not exist.
        """
        key = ref_key(check_name(run_id, "run_id"), check_name(branch, "branch"))
        if self._closed:
            raise StoreError("the store is closed", where=self._path)
        return CheckpointView(self, None, verify=verify, head=(key, f"{run_id}/{branch}"))

    def _commit(self, op: CheckpointWrite) -> None:
        if self._durability == "sync":
            self._write(lambda txn: self._apply(txn, op))
            return
        self._live()
        with self._pending_lock:
            self._pending.append(op)
            full = len(self._pending) >= self._batch_size
        if full:
            self.flush()

    def flush(self) -> None:
        """Commit every queued checkpoint in one durable txn (batched mode).

        On failure (e.g. a ref conflict) the whole batch is rolled back and dropped.
        """
        with self._pending_lock:
            ops, self._pending = self._pending, []

        def apply_all(txn: Txn[memoryview]) -> None:
            for op in ops:
                self._apply(txn, op)

        if ops:
            self._write(apply_all)

    @property
    def pending(self) -> int:
        """Checkpoints queued but not yet committed (always 0 in sync mode)."""
        return len(self._pending)

    def _apply(self, txn: Txn[memoryview], op: CheckpointWrite) -> None:
        objects, cps = self._db("objects"), self._db("checkpoints")
        rkey = ref_key(op.run_id, op.branch)
        current = read_ref(txn, self._e.dbs, rkey, layout=self._e.layout)
        current_b = None if current is None else current[0]
        if current_b != op.expected_ref:
            raise ConflictError(
                "the branch moved since this recorder read it",
                where=f"refs/{op.run_id}/{op.branch}",
                expected=hex_id(op.expected_ref),
                got=hex_id(current_b),
            )
        if op.parent is not None and txn.get(op.parent, db=cps) is None:
            # Only a fork's first checkpoint can get here (a branch head is
            # never pruned): retention swept the checkpoint it forks from while
            # the recorder held it. Its history is gone, so refuse rather than
            # write a child whose parent (and inherited logs) are not stored.
            pruned = txn.get(op.parent, db=self._db("tombstones")) is not None
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
            if txn.get(key, db=objects) is None:
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
        txn.delete(op.cid, db=self._db("tombstones"))
        if op.sealed_ledger is not None:
            txn.put(op.sealed_ledger, op.cid, overwrite=False, db=self._db("ledgers"))
        write_ref(txn, self._e.dbs, rkey, op.cid, RECORDED)

    # -- refs ----------------------------------------------------------------

    def ref(self, run_id: str, branch: str = "main") -> str | None:
        """The head checkpoint id of ``run_id``/``branch``, or None."""
        key = ref_key(check_name(run_id, "run_id"), check_name(branch, "branch"))
        with self._read() as txn:
            return hex_id(self._head(txn, key))

    def _head(self, txn: Txn[memoryview], key: bytes) -> bytes | None:
        """The checkpoint ref ``key`` names, or None; its check and target are verified.

        IntegrityError when the ref fails its check, names a checkpoint that
        is not stored, or one of another run (or branch, for a recorded head).
        """
        found = read_ref(txn, self._e.dbs, key, layout=self._e.layout)
        if found is None:
            return None
        cid, origin = found
        try:
            raw, _ = self._load_raw(txn, cid, verify=True, full=False)
        except NotFoundError as exc:
            run, branch = split_ref_key(key)
            raise IntegrityError(
                "ref does not resolve",
                where=f"refs/{run}/{branch}",
                expected=cid.hex(),
                got=exc.what,
            ) from None
        check_ref_target(key, origin, raw.get("run_id"), raw.get("branch"))
        return cid

    def set_ref(self, run_id: str, branch: str, new: str, *, expected_old: str | None) -> None:
        """Compare-and-set a head: move it to ``new`` if it is ``expected_old``.

        Only forward: ``new`` must descend from the current head (or the
        branch must not exist yet), else :class:`NotDescendantError`; moving
        a branch elsewhere or deleting it (``new=None``) is :meth:`reset_ref`,
        which is audited and keeps the old history until it is released.
        """
        key = ref_key(check_name(run_id, "run_id"), check_name(branch, "branch"))
        if new is None:
            raise NotDescendantError(
                "deleting a branch drops its history; use reset_ref(..., None, ...)",
                where=f"refs/{run_id}/{branch}",
                expected="a checkpoint id",
                got=None,
            )
        new_raw = parse_id(new)
        old_raw = None if expected_old is None else parse_id(expected_old, "expected_old")

        def cas(txn: Txn[memoryview]) -> None:
            self._cas(txn, key, old_raw)
            origin = self._ref_target(txn, key, new_raw)
            if old_raw is not None:
                self._check_descends(txn, key, new_raw, old_raw)
            write_ref(txn, self._e.dbs, key, new_raw, origin)

        self._write(cas)

    def _cas(self, txn: Txn[memoryview], key: bytes, expected: bytes | None) -> None:
        found = read_ref(txn, self._e.dbs, key, layout=self._e.layout)
        current = None if found is None else found[0]
        if current != expected:
            run, branch = split_ref_key(key)
            raise ConflictError(
                "ref compare-and-set lost",
                where=f"refs/{run}/{branch}",
                expected=hex_id(expected),
                got=hex_id(current),
            )

    def _ref_target(self, txn: Txn[memoryview], key: bytes, cid: bytes) -> int:
        """The origin a ref ``key`` -> ``cid`` gets; InvalidInputError for another run."""
        run, branch = split_ref_key(key)
        m = self._load_manifest(txn, cid, verify=True)
        if m.run_id != run:
            raise InvalidInputError(
                "a ref can only point at a checkpoint of its own run",
                where=f"refs/{run}/{branch}",
                expected=run,
                got=m.run_id,
            )
        return RECORDED if m.branch == branch else SET

    def _check_descends(
        self, txn: Txn[memoryview], key: bytes, cid: bytes, ancestor: bytes
    ) -> None:
        """NotDescendantError unless ``ancestor`` is ``cid`` or on its parent chain.

        A chain that reaches a link no longer stored (pruned, or missing) is
        refused too, but says so: past that link descent can be neither proven
        nor refuted, and the caller needs reset_ref, not a wrong reason.
        """
        run, branch = split_ref_key(key)
        cps = self._db("checkpoints")
        at: bytes | None = cid
        while at is not None:
            if at == ancestor:
                return
            if txn.get(at, None, cps) is None:
                pruned = txn.get(at, None, self._db("tombstones")) is not None
                raise NotDescendantError(
                    "descent cannot be proven: the checkpoint's history is "
                    f"{'pruned' if pruned else 'missing (not pruned)'} at {at.hex()}; "
                    "use reset_ref to move the branch",
                    where=f"refs/{run}/{branch}",
                    expected=f"a descendant of {ancestor.hex()}",
                    got=cid.hex(),
                )
            parent = self._load_manifest(txn, at, verify=True).parent
            at = None if parent is None else bytes.fromhex(parent)
        raise NotDescendantError(
            "the checkpoint does not descend from the branch head; "
            "use reset_ref to move a branch back or sideways",
            where=f"refs/{run}/{branch}",
            expected=f"a descendant of {ancestor.hex()}",
            got=cid.hex(),
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
        retention root (its whole history survives ``prune``) until
        :meth:`release_retained` lets it go. Returns the audit record.
        """
        key = ref_key(check_name(run_id, "run_id"), check_name(branch, "branch"))
        new_raw = None if new is None else parse_id(new)
        old_raw = None if expected_old is None else parse_id(expected_old, "expected_old")
        who = check_name(operator, "operator")
        why = check_name(reason, "reason")
        when = float(self.now())

        def reset(txn: Txn[memoryview]) -> AuditRecord:
            self._cas(txn, key, old_raw)
            origin = None if new_raw is None else self._ref_target(txn, key, new_raw)
            record = append_audit_txn(
                self,
                txn,
                "ref_reset",
                {
                    "run": run_id,
                    "branch": branch,
                    "old": hex_id(old_raw),
                    "new": hex_id(new_raw),
                    "operator": who,
                    "reason": why,
                },
                when,
            )
            if old_raw is not None and old_raw != new_raw:
                txn.put(
                    retained_key(old_raw),
                    encode_value({"run": run_id, "branch": branch, "audit": record.digest}),
                    db=self._db("meta"),
                )
            if new_raw is None or origin is None:
                delete_ref(txn, self._e.dbs, key)
            else:
                write_ref(txn, self._e.dbs, key, new_raw, origin)
            return record

        result: AuditRecord = self._write(reset)
        return result

    def repair_ref(
        self,
        run_id: str,
        branch: str,
        new: str | None,
        *,
        operator: str,
        reason: str,
    ) -> AuditRecord:
        """Replace (or delete, ``new=None``) a ref that fails its check, audited.

        The repair path for a damaged ref, which blocks ``prune`` and every
        CAS: refused with :class:`ConflictError` unless the stored ref fails
        its check. In one write txn: a ``ref_repair`` audit record (``run``,
        ``branch``, ``damaged``: the stored value in hex, ``new``, ``retained``,
        ``operator``, ``reason``), the new value, and, when the damaged value's
        first 16 bytes name a stored checkpoint, that checkpoint kept as a
        retained head (as :meth:`reset_ref` keeps an old head). Returns the record.
        """
        key = ref_key(check_name(run_id, "run_id"), check_name(branch, "branch"))
        new_raw = None if new is None else parse_id(new)
        who = check_name(operator, "operator")
        why = check_name(reason, "reason")
        when = float(self.now())

        def repair(txn: Txn[memoryview]) -> AuditRecord:
            stored = txn.get(key, None, self._db("refs"))
            if stored is None:
                raise NotFoundError("no such ref", where=f"refs/{run_id}/{branch}")
            damaged = bytes(stored)
            try:
                unpack_ref(key, damaged)
            except IntegrityError:
                pass
            else:
                raise ConflictError(
                    "the ref passes its check; repair_ref only replaces a damaged ref "
                    "(use set_ref or reset_ref)",
                    where=f"refs/{run_id}/{branch}",
                    expected="a ref that fails its check",
                    got=damaged.hex(),
                )
            origin = SET if new_raw is None else self._ref_target(txn, key, new_raw)
            named = damaged[:DIGEST_SIZE]
            keep = (
                named
                if len(named) == DIGEST_SIZE
                and named != new_raw
                and txn.get(named, None, self._db("checkpoints")) is not None
                else None
            )
            record = append_audit_txn(
                self,
                txn,
                "ref_repair",
                {
                    "run": run_id,
                    "branch": branch,
                    "damaged": damaged.hex(),
                    "new": hex_id(new_raw),
                    "retained": hex_id(keep),
                    "operator": who,
                    "reason": why,
                },
                when,
            )
            if keep is not None:
                txn.put(
                    retained_key(keep),
                    encode_value({"run": run_id, "branch": branch, "audit": record.digest}),
                    db=self._db("meta"),
                )
            replace_damaged_ref(txn, self._e.dbs, key, new_raw, origin)
            return record

        result: AuditRecord = self._write(repair)
        return result

    def retained(self) -> dict[str, dict[str, Any]]:
        """Heads kept by :meth:`reset_ref`: id -> ``{"run", "branch", "audit"}``."""
        with self._read() as txn:
            heads = retained_heads(txn, self._db("meta"))
        return {cid.hex(): record for cid, record in heads.items()}

    def release_retained(self, checkpoint_id: str, *, operator: str, reason: str) -> AuditRecord:
        """Stop keeping a head :meth:`reset_ref` retained; audited. The next prune may sweep it."""
        cid = parse_id(checkpoint_id)
        who = check_name(operator, "operator")
        why = check_name(reason, "reason")
        when = float(self.now())

        def release(txn: Txn[memoryview]) -> AuditRecord:
            if not txn.delete(retained_key(cid), db=self._db("meta")):
                raise NotFoundError(
                    "no retained head with this id", where="retained", got=cid.hex()
                )
            return append_audit_txn(
                self,
                txn,
                "retained_release",
                {"checkpoint": cid.hex(), "operator": who, "reason": why},
                when,
            )

        result: AuditRecord = self._write(release)
        return result

    def fork(self, run_id: str, branch: str, checkpoint_id: str) -> None:
        """Create ``branch`` of ``run_id`` at ``checkpoint_id``; ConflictError if it exists."""
        self.set_ref(run_id, branch, checkpoint_id, expected_old=None)

    def runs(self, *, limit: int | None = None) -> list[str]:
        """Run ids that have at least one ref, in sorted order."""
        out: list[str] = []
        with self._read() as txn, txn.cursor(db=self._db("refs")) as cur:
            checked = self._e.layout_in(txn) != 1
            found = cur.first()
            while found and (limit is None or len(out) < limit):
                if checked:
                    unpack_ref(cur.key(), cur.value())  # a damaged key names no run
                run, _ = split_ref_key(cur.key())
                out.append(run)
                found = cur.set_range(run.encode("utf-8", "surrogatepass") + b"\x01")
        return out

    def branches(self, run_id: str) -> dict[str, str]:
        """Branch name -> head checkpoint id for ``run_id``."""
        prefix = ref_key(check_name(run_id, "run_id"), "x")[:-1]
        out: dict[str, str] = {}
        with self._read() as txn:
            with txn.cursor(db=self._db("refs")) as cur:
                keys: list[bytes] = []
                found = cur.set_range(prefix)
                while found and bytes(cur.key()).startswith(prefix):
                    keys.append(bytes(cur.key()))
                    found = cur.next()
            for key in keys:
                head = self._head(txn, key)
                if head is not None:
                    out[split_ref_key(key)[1]] = head.hex()
        return out

    def history(
        self, run_id: str, branch: str = "main", *, limit: int | None = None, verify: bool = True
    ) -> list[Manifest]:
        """Manifests from the head of ``branch`` back through parents, newest first.

        The walk stops at ``limit``, at a run's first checkpoint or at a pruned one.
        """
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise InvalidInputError("limit must be a non-negative int or None", got=limit)
        key = ref_key(check_name(run_id, "run_id"), check_name(branch, "branch"))
        out: list[Manifest] = []
        cps = self._db("checkpoints")
        with self._read() as txn:
            cid = self._head(txn, key)
            while cid is not None and (limit is None or len(out) < limit):
                if txn.get(cid, db=cps) is None:
                    break  # pruned: history ends here
                m = self._load_manifest(txn, cid, verify=verify)
                out.append(m)
                cid = None if m.parent is None else bytes.fromhex(m.parent)
        return out

    # -- audit ---------------------------------------------------------------

    def append_audit(self, kind: str, body: Mapping[str, Any]) -> AuditRecord:
        """Append a hash-chained audit record (committed durably before returning)."""
        return append_audit(self, kind, body)

    def audit_records(
        self, *, kind: str | None = None, start: int = 0, limit: int | None = None
    ) -> Iterator[AuditRecord]:
        """Audit records in order from index ``start``, optionally of one ``kind``."""
        return audit_records(self, kind=kind, start=start, limit=limit)

    @property
    def audit_keyed(self) -> bool:
        """True when this store's audit log carries keyed MACs (docs/security.md)."""
        return self._audit_keyed

    def check_audit_mac(self, index: int) -> None:
        """Raise AuditChainError unless audit record ``index`` carries its true keyed MAC.

        A no-op on an unkeyed store; on a keyed store opened without the key it
        raises, since nothing it reads can be trusted against a forger.
        """
        if not self._audit_keyed:
            return
        if self._audit_key is None:
            raise AuditChainError(
                "this store's audit log is keyed; open it with audit_key= to trust a record",
                where=f"audit/{index}",
            )
        with self._read() as txn:
            check_mac(txn, self._e.dbs, self._audit_key, index)

    def get_audit(self, digest_hex: str) -> AuditRecord:
        """The audit record with this digest (NotFoundError if none)."""
        return get_audit(self, digest_hex)

    # -- maintenance ---------------------------------------------------------

    def verify(self, *, progress: Callable[[int, int], None] | None = None) -> VerifyReport:
        """Re-hash every object and manifest, resolve every reference, check the audit chain.

        ``progress(done, total)`` is called every few thousand entries and once at the end.
        It runs in this process: some damaged B-tree pages make liblmdb abort or fault,
        which kills the interpreter. ``cpstore verify`` runs the walk in a child process
        and reports that as damage (exit 5); use it for a store you do not trust.
        """
        self._live()
        return verify(self, progress)

    def verify_checkpoint(self, checkpoint_id: str) -> tuple[Problem, ...]:
        """Re-hash everything ``checkpoint_id`` reaches, in one read txn; () when intact.

        The manifest and its header, every state part, chunk index and chunk,
        every log, observation and effect payload, the transcript and the token
        records, values and offsets. Each problem names the object.
        """
        cid = parse_id(checkpoint_id)
        self._live()
        with self._read() as txn:
            return tuple(check_checkpoint_objects(txn, self._e.dbs, cid))

    def delete_run(self, run_id: str) -> int:
        """Delete every ref of ``run_id`` and sweep; returns checkpoints removed."""
        self._live()
        return delete_run(self, check_name(run_id, "run_id"))

    def prune(self, *, keep_last: int, run_id: str | None = None) -> int:
        """Keep each branch's newest ``keep_last`` checkpoints (of ``run_id`` or all); sweep."""
        if not isinstance(keep_last, int) or isinstance(keep_last, bool) or keep_last < 1:
            raise InvalidInputError("keep_last must be an int >= 1", got=keep_last)
        self._live()
        return prune(
            self,
            keep_last=keep_last,
            run_id=None if run_id is None else check_name(run_id, "run_id"),
        )

    def now(self) -> float:
        """The clock the store stamps records with (overridable in tests)."""
        return time.time()


def _check_store_path(path: object) -> None:
    """Refuse a path that cannot be a store folder before anything touches it."""
    if not isinstance(path, (str, bytes, os.PathLike)):
        raise InvalidInputError("a store path must be a str or path", got=type(path).__name__)
    # LMDB takes the path as UTF-8: a name with undecodable bytes has no such form.
    check_text(os.fsdecode(path), "store path")
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return  # a new store
    except ValueError as exc:  # an embedded NUL: no OS path can hold it
        raise InvalidInputError("not a usable path", where="store path", got=str(exc)) from None
    except OSError as exc:
        raise InvalidInputError(
            "cannot use this path as a store folder",
            where=os.fsdecode(path),
            got=exc.strerror or str(exc),
        ) from None
    if not stat.S_ISDIR(st.st_mode):
        kind = "a regular file" if stat.S_ISREG(st.st_mode) else "a FIFO, socket or device"
        raise InvalidInputError(
            "not a store folder", where=os.fsdecode(path), expected="a folder", got=kind
        )


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
    anything else that is not a cpstore store (an empty or foreign data.mdb,
    a folder of other files) raises :class:`FormatVersionError` naming the
    path, and a missing store opened with ``create=False`` or ``readonly``
    raises :class:`NotFoundError`. A ``readonly`` open of a store whose
    folder this user cannot write works without LMDB's lock file
    (docs/store.md, "Read-only opens").

    ``audit_key`` (16 to 64 bytes, kept outside the store) makes the audit log
    and sign-offs tamper-evident with keyed MACs (docs/security.md).
    """
    _check_store_path(path)
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
