"""What both backends share, as :class:`BackendBase`, the base of ``LmdbBackend`` and
``PgBackend``: the handle's identity (path, closed, audit key), the batched queue's
accounting (pending, queued writes, owes a flush), the exit flush and the manifest load.

Only what is the same logic on both engines is here; each engine's commit, flush, close
and transactions are its own (lmdb_backend.py, pg_backend.py). Members are inherited,
never wrapped: a call costs what it cost on the backend's own class.
"""

from __future__ import annotations

import os
import time
import warnings
import weakref
from collections import deque
from typing import Any

from cpstore.store.at_exit import ExitGate, flush_bounded, lost_message
from cpstore.store.backend import Txn
from cpstore.store.batch_owners import BatchOwners
from cpstore.store.manifest import Manifest, manifest_from_raw
from cpstore.store.model import CheckpointWrite, created_at_of

__all__ = ["FORK_MARKED", "BackendBase"]

#: The backends that tell their process by ``_pid`` (``PgBackend`` adds each): a fork()
#: child makes each no process's (0). A descendant forked after the opener exited, given
#: its pid, used the opener's store as its own (review92; LMDB's: lmdb_registry).
FORK_MARKED: weakref.WeakSet[Any] = weakref.WeakSet()


def _mark_in_child() -> None:
    for backend in list(FORK_MARKED):
        backend._pid = 0


os.register_at_fork(after_in_child=_mark_in_child)


class BackendBase:
    """The members ``LmdbBackend`` and ``PgBackend`` share (see the module docstring)."""

    _path: str
    _closed: bool
    _audit_key: bytes | None
    _audit_keyed: bool
    _pending: list[CheckpointWrite]
    _owners: BatchOwners[CheckpointWrite]
    _exit_gate: ExitGate | None
    _exit_ran: bool

    # -- what each engine defines --------------------------------------------------

    def _here(self) -> bool:
        """Open, and in the process that opened it (a fork child owes no flush)."""
        raise NotImplementedError

    def _exit_bound(self, wait: float) -> None:
        """Bound this engine's own waits of the exit flush by ``wait`` seconds (none)."""

    def kept_reads(self) -> deque[tuple[int, Any]] | None:
        """Reads a caller's zero-copy views keep past their block (Backend's): None, the
        engine's views are copies (PostgreSQL); LMDB's are its environment's."""
        return None

    def flush(self) -> None:
        """Commit every queued checkpoint (the engine's)."""
        raise NotImplementedError

    def load_raw(
        self,
        txn: Txn[memoryview],
        cid: bytes,
        *,
        verify: bool,
        full: bool = True,
        hints: list[bytes] | None = None,
    ) -> tuple[dict[str, Any], bytes]:
        """(manifest map, 16-byte entry header) of a checkpoint (the engine's)."""
        raise NotImplementedError

    # -- what it is ------------------------------------------------------------

    @property
    def path(self) -> str:
        """The store directory (LMDB) or URL, password redacted (PostgreSQL)."""
        return self._path

    @property
    def closed(self) -> bool:
        """True after :meth:`close`."""
        return self._closed

    @property
    def audit_key(self) -> bytes | None:
        """The audit MAC key this handle was opened with, or None."""
        return self._audit_key

    @property
    def audit_keyed(self) -> bool:
        """True when the store's audit log carries keyed MACs."""
        return self._audit_keyed

    def now(self) -> float:
        """The clock records are stamped with."""
        return time.time()

    # -- the batched queue -------------------------------------------------------

    def owes_flush(self) -> bool:
        """True when this process queued checkpoints it has not committed yet."""
        return self._here() and bool(self._pending) and not self._exit_ran

    def queued_writes(self) -> list[CheckpointWrite]:
        """The queue as it stands (batched mode)."""
        return list(self._pending)

    @property
    def pending(self) -> int:
        """Checkpoints queued but not yet committed (always 0 in sync and none modes)."""
        return len(self._pending)

    def flush_at_exit(self, wait: float) -> None:
        """Commit queued checkpoints at interpreter exit; never hangs, never hides a loss.

        On LMDB a map growth waits at most ``wait`` seconds for reads of other
        threads (a daemon thread's read may never end). A flush that fails is a
        RuntimeWarning naming every checkpoint not written.
        """
        if not self._here() or not (self._pending or self._owners.flying()):
            return
        queued = list(self._pending) + self._owners.flying()
        self._exit_ran = True
        self._exit_bound(wait)
        self._owners.exit_wait = wait
        self._owners.gate = self._exit_gate = gate = ExitGate()
        me = self._owners.me()

        def flush_as_me() -> None:  # the worker flushes as this thread (batch_owners.act_as)
            self._owners.act_as(me)
            self.flush()

        try:
            # The writer lock (LMDB's, or PostgreSQL's advisory lock): no bound of its own.
            flush_bounded(flush_as_me, gate, wait, self._path)
            self._owners.wait_all()  # a daemon thread's flush may hold the queue (audit20)
        except Exception as exc:  # an exit hook must say what is lost, not raise
            warnings.warn(
                lost_message(self._path, queued, exc, "at interpreter exit"),
                RuntimeWarning,
                stacklevel=1,
            )

    # -- checkpoints -------------------------------------------------------------

    def load_manifest(self, txn: Txn[memoryview], cid: bytes, *, verify: bool) -> Manifest:
        """The decoded manifest of ``cid``."""
        raw, header = self.load_raw(txn, cid, verify=verify)
        return manifest_from_raw(cid, raw, created_at_of(header, cid if verify else None))
