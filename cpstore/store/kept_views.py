"""Zero-copy views a checkpoint reader hands to its caller, and the read they hold.

``CheckpointView.token_records()`` and ``token_value_views()`` point into LMDB's map.
CPython cannot revoke a memoryview's slices (``v[1:5]``, ``memoryview(v)``) or its
exports (``numpy.frombuffer(v)``): ``v.release()`` leaves them reading, and once the
read txn ended they read pages a writer may reuse (wrong bytes), and once the map moved
(a resize here, or adopting another process's growth) memory no longer mapped (SIGBUS).
So each view handed out is made by :func:`~cpstore.native.binding.kept_view`, which
calls back when the last object made from it is gone, and the read ends then: at the
block's end when nothing made from the views is left (the common case), else when the
last slice or export is released, on whatever thread that is, through the handover of
a lost read (``Backend.lost_read``: the owner thread's next read ends it; a resize or a
close counts it as ended). Until then the read is open: the map cannot change size in
this process (:class:`ResizeWait`, :func:`held_read_error`) and a close leaves the
environment open (``Env.left_open``).
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter, deque
from typing import Any

from cpstore.errors import ReadHeldDuringResizeError, StoreError
from cpstore.native.binding import kept_view
from cpstore.store.backend import Backend, Txn

__all__ = [
    "KEPT_WAIT_SECONDS",
    "KeptViews",
    "ReaderViews",
    "ResizeWait",
    "held_read_error",
    "kept_by",
    "release_views",
]

#: The longest a map resize waits for reads that only kept views hold (they end only
#: when their caller lets go of them) before it refuses.
KEPT_WAIT_SECONDS = 5.0

_HOW = (
    "copy what must outlive the block (bytes(view[a:b]), or tokens()/token_values()) "
    "or release it (del, .release())"
)


class KeptViews:
    """The views one reader's read handed to its caller, and who ends that read.

    Every step is one C call under the GIL (a list's append or pop, a deque's), never a
    lock: the release runs in a finalizer, on any thread, inside any other call (a write
    txn of this store, a resize's wait). Exactly one of the block's end and the last
    release ends the read: whichever finds the block ended and no view left takes the
    txn out of ``_txn`` (a one-item deque's ``pop``)."""

    __slots__ = ("_by_block", "_ended", "_kept", "_live", "_store", "_txn", "_who")

    def __init__(self, store: Backend, txn: Txn[memoryview], who: int) -> None:
        self._store = store
        self._txn: deque[Txn[memoryview]] = deque((txn,))
        self._who = who
        self._live: list[None] = []  # one per view made and not yet released
        self._ended: list[None] = []  # non-empty once the block ended
        self._by_block: list[None] = []  # non-empty once the block's end took the read
        self._kept: deque[tuple[int, Any]] | None = store.kept_reads()

    def wrap(self, view: memoryview) -> memoryview:
        """``view`` as a caller's view whose last slice or export ends the read."""
        # Counted first and never undone: an interrupt landing before the callback is set
        # leaves the read open (a close gives up, a resize refuses), never ended early.
        self._live.append(None)
        return kept_view(view, self._released)

    def block_ended(self) -> bool:
        """At the block's end (its exit, or the reader's finalizer): True when the caller
        ends the read now (no view outlives the block), False when kept views hold it.
        Called again (an interrupt cut its caller short), it answers as before."""
        if self._by_block:
            return True
        kept, entry = self._kept, (self._who, self)
        if kept is not None and not self._ended and entry not in kept:
            kept.append(entry)  # first: a resize or a close sees the read as kept
        self._ended.append(None)
        if self._live or self._claim() is None:
            return False
        self._by_block.append(None)
        if kept is not None and entry in kept:
            kept.remove(entry)
        return True

    def _claim(self) -> Txn[memoryview] | None:
        try:
            return self._txn.pop()
        except IndexError:  # the other side took it
            return None

    def _released(self, _cdata: Any) -> None:
        # ffi.gc's callback: the last object made from one view is gone.
        self._live.pop()
        if self._live or not self._ended:
            return
        txn = self._claim()
        if txn is None:
            return
        self._store.lost_read(txn, self._who)  # first: the read is lost before not kept
        kept = self._kept
        if kept is not None:
            kept.remove((self._who, self))


class ReaderViews(list[memoryview]):
    """A checkpoint reader's views of the map once it handed one out: itself the list of
    those it read (a plain list until then: the read path's appends and truth tests stay
    C calls), ``handed`` those handed to its caller, and the read they keep."""

    __slots__ = ("handed", "kept")

    def __init__(self, read: list[memoryview]) -> None:
        super().__init__(read)
        self.handed: list[memoryview] = []
        self.kept: KeptViews | None = None

    def hand(self, store: Backend, txn: Txn[memoryview], who: int, view: memoryview) -> memoryview:
        """``view`` as handed to the caller: kept when it points into memory no object owns
        (the map; PostgreSQL's and a lock-less read's are owned copies)."""
        if type(view) is not memoryview or view.obj is not None:
            return view
        if self.kept is None:
            self.kept = KeptViews(store, txn, who)
        self.handed.append(self.kept.wrap(view))
        return self.handed[-1]

    def block_ended(self) -> bool:
        """True when the reader ends its read now; False: kept views hold it."""
        kept = self.kept
        return kept is None or kept.block_ended()


def release_views(views: list[memoryview]) -> None:
    """At a reader's block end: every view released but what a slice or an export keeps
    (the handed ones first: each exports its map view until the last object made from it
    goes)."""
    for each in (views.handed, views) if type(views) is ReaderViews else (views,):
        for view in each:
            with contextlib.suppress(BufferError):  # exported: kept, or an internal use's
                view.release()
        each.clear()


def kept_by(kept: deque[tuple[int, Any]], who: int | None) -> bool:
    """Whether thread ``who`` (None: any) has a read that kept views hold."""
    return any(who is None or t == who for t, _ in tuple(kept))


def held_read_error(path: str, kept: deque[tuple[int, Any]], who: int) -> StoreError:
    """What a resize (or a write waiting for one) tells thread ``who`` holding a read."""
    if kept_by(kept, who):
        return ReadHeldDuringResizeError(
            "the map must change size but a zero-copy view this thread took from a "
            "checkpoint reader (token_records, token_value_views) is still referenced "
            "after its block (a slice, memoryview() or an export of it), and keeps its read",
            where=path,
            expected=_HOW,
        )
    return ReadHeldDuringResizeError(
        "the map must change size but this thread holds an open read view",
        where=path,
        expected="no open store.read() in a thread that writes while the map grows",
    )


class ResizeWait:
    """A resize's wait for this process's reads: refused after ``bound`` seconds (None:
    no bound), or after :data:`KEPT_WAIT_SECONDS` once only kept views hold reads."""

    __slots__ = ("_bound", "_deadline", "_kept_since", "_path")

    def __init__(self, path: str, bound: float | None) -> None:
        self._path, self._bound = path, bound
        self._deadline = None if bound is None else time.monotonic() + bound
        self._kept_since: float | None = None

    def check(
        self, active: tuple[int, ...], lost: Counter[int], kept: deque[tuple[int, Any]]
    ) -> None:
        """Raise when the wait is over; ``active``/``lost``: EnvTxns' reads, lost reads."""
        now = time.monotonic()
        if self._deadline is not None and now >= self._deadline:
            raise StoreError(
                "the map must change size but a read of another thread of this process did not end",
                where=self._path,
                expected=f"every store.read() block ended within {self._bound} s",
                got=f"{len(active)} open read(s)",
            )
        held = Counter(t for t, _ in tuple(kept)) if kept else None
        if held is None or any(active.count(t) - lost[t] > held[t] for t in set(active)):
            self._kept_since = None  # a read of a block still running: it ends by itself
            return
        if self._kept_since is None:
            self._kept_since = now
        elif now - self._kept_since >= KEPT_WAIT_SECONDS:
            raise ReadHeldDuringResizeError(
                "the map must change size but zero-copy views taken from a checkpoint "
                "reader (token_records, token_value_views) are still referenced after "
                f"their block (a slice, memoryview() or an export of one) by "
                f"{sum(held.values())} read(s) of this process, which stay open until then",
                where=self._path,
                expected=_HOW,
                got=f"still referenced after {KEPT_WAIT_SECONDS:.0f} s",
            )
