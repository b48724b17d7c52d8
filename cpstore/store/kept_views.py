"""Zero-copy views a checkpoint reader hands to its caller, and the read they hold.

``CheckpointView.token_records()`` and ``token_value_views()`` point into LMDB's map.
CPython cannot revoke a memoryview's slices (``v[1:5]``, ``memoryview(v)``) or its
exports (``numpy.frombuffer(v)``): ``v.release()`` leaves them reading, and once the
read txn ended they read pages a writer may reuse (wrong bytes), and once the map moved
(a resize here, or adopting another process's growth) memory no longer mapped (SIGBUS).
So each view handed out is made by :func:`~cpstore.native.binding.kept_view`, which
calls back when the last object made from it is gone, and the read ends then: at the
block's end when nothing made from the views is left (the common case), else once the
last slice or export is released (on any thread): the next read, resize or close of
the environment (:func:`settle`) hands it over as a lost read (``EnvTxns._lost``, what
``lost_read`` appends to: the owner thread's next read ends it; a resize or a close
counts it as ended). Until then the read is open: the map cannot change size in this
process (:class:`ResizeWait`, :func:`held_read_error`) and a close leaves the
environment open (``Env.left_open``).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections import Counter, deque
from operator import length_hint
from typing import Any

from cpstore.errors import ReadHeldDuringResizeError, StoreError
from cpstore.native.binding import kept_view
from cpstore.store.backend import Backend, Txn
from cpstore.store.lmdb_open import PROCESS

__all__ = [
    "KEPT_WAIT_SECONDS",
    "KeptViews",
    "ReaderViews",
    "ResizeWait",
    "held_read_error",
    "kept_by",
    "kept_in",
    "release_views",
    "settle",
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

    No Python code runs when a view goes: its ``ffi.gc`` callback is ``next(gone, cdata)``
    (``functools.partial`` over a range iterator: C calls only, so no pending signal
    handler lands in it, where an exception would be swallowed and the read never
    ended; it runs on any thread, inside any other call), and ``length_hint(gone)`` says
    how many went. The read is ended by the block's end when every view is gone by then,
    else handed over by :func:`settle` (a thread's next read, a resize's or a close's
    wait). Exactly one of them takes it: ``_handover`` (the read, then :data:`_END`) is
    emptied into the taker's deque by one C call (``extend`` over ``iter(popleft,
    _END)``), so nothing lands between the taking and the handing over, and a second
    taker finds it empty (IndexError)."""

    __slots__ = (
        "_by_block",
        "_ended",
        "_gone",
        "_handover",
        "_kept",
        "_live",
        "_made_in",
        "_on_release",
        "_who",
    )

    def __init__(self, kept: deque[tuple[int, Any]], txn: Txn[memoryview], who: int) -> None:
        self._handover: deque[Any] = deque(((who, txn), _END))
        self._live: list[None] = []  # one per view made
        self._gone = iter(range(_MANY))  # one step per view gone
        self._on_release = functools.partial(next, self._gone)
        self._ended: list[None] = []  # non-empty once the block ended
        self._by_block: deque[Any] = deque()  # the read, once the block's end took it
        self._kept, self._who, self._made_in = kept, who, PROCESS[0]

    def wrap(self, view: memoryview) -> memoryview:
        """``view`` as a caller's view whose last slice or export may end the read."""
        # Counted first and never undone: an interrupt landing before the callback is set
        # leaves the read open (a close gives up, a resize refuses), never ended early.
        self._live.append(None)
        return kept_view(view, self._on_release)

    def all_released(self) -> bool:
        """Whether the block ended and every view made from this read is gone."""
        return bool(self._ended) and _MANY - length_hint(self._gone) >= len(self._live)

    def block_ended(self) -> bool:
        """At the block's end (its exit, or the reader's finalizer): True when the caller
        ends the read now (no view outlives the block), False when kept views hold it
        (noted as kept: :func:`settle` hands it over once they are gone). Called again
        (an interrupt cut its caller short), it answers as before."""
        if self._by_block:
            return True
        self._ended.append(None)
        if self.all_released():
            try:
                self._by_block.extend(iter(self._handover.popleft, _END))
            except IndexError:  # a settle took it: handed over as lost
                return False
            self._by_block[0] = _END  # the txn let go of: end_read frees its object
            return True
        entry = (self._who, self)
        if entry not in self._kept:
            self._kept.append(entry)
        return False


#: The end of a :class:`KeptViews`' handover deque.
_END = object()
#: More views than one read makes (the range :class:`KeptViews` counts the gone ones by).
_MANY = 1 << 62


def settle(kept: deque[tuple[int, Any]], lost: deque[tuple[int, Any]]) -> None:
    """Hand every kept read whose views are all gone over as a lost read (``lost``:
    ``EnvTxns._lost``: its thread's next read ends it, a resize or a close counts it as
    ended), and forget it as kept. Any thread; in a fork() child, none (the parent's)."""
    for entry in list(kept):
        views = entry[1]
        if views.all_released() and views._made_in is PROCESS[0]:
            with contextlib.suppress(IndexError):  # taken: by the block, or another settle
                lost.extend(iter(views._handover.popleft, _END))
            with contextlib.suppress(ValueError):
                kept.remove(entry)


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
            kept = store.kept_reads()
            if kept is None:  # the engine's views are copies: nothing to keep
                return view
            self.kept = KeptViews(kept, txn, who)
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
            try:  # not contextlib.suppress: ~0.4 us a view less, on every reader's exit
                view.release()
            except BufferError:  # exported: kept, or an internal use's
                continue
        each.clear()


def kept_by(kept: deque[tuple[int, Any]], who: int, lost: deque[tuple[int, Any]]) -> bool:
    """Whether thread ``who`` has a read that kept views hold (those all gone settled)."""
    settle(kept, lost)
    return any(t == who for t, _ in list(kept))


def kept_in(kept: deque[tuple[int, Any]], who: int) -> int:
    """How many reads of thread ``who`` kept views hold (none of them a running block's): a
    thread with no other read waits for a resize (review95: it began read after read
    beside another thread's growth, which never saw kept reads alone and waited for ever).
    An entry whose read was taken (handed over as lost, or ended) is not counted."""
    return sum(t == who and bool(v._handover) for t, v in list(kept)) if kept else 0


def held_read_error(path: str, kept: deque[tuple[int, Any]], who: int) -> StoreError:
    """What a resize (or a write waiting for one) tells thread ``who`` holding a read."""
    if any(t == who for t, _ in list(kept)):
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

    def check(self, active: list[int], lost: Counter[int], kept: deque[tuple[int, Any]]) -> None:
        """Raise when the wait is over; ``active``/``lost``: EnvTxns' reads, lost reads. Once
        only kept views hold reads, the error names them, at the bound too (an exit flush's:
        it said "a read of another thread ... did not end", review95)."""
        now = time.monotonic()
        held = Counter(t for t, _ in list(kept)) if kept else None
        if held is None or any(active.count(t) - lost[t] > held[t] for t in set(active)):
            self._kept_since = None  # a read of a block still running: it ends by itself
        elif self._kept_since is None:
            self._kept_since = now
        over = self._deadline is not None and now >= self._deadline
        since = self._kept_since
        if held is not None and since is not None and (over or now - since >= KEPT_WAIT_SECONDS):
            raise ReadHeldDuringResizeError(
                "the map must change size but zero-copy views taken from a checkpoint "
                "reader (token_records, token_value_views) are still referenced after "
                f"their block (a slice, memoryview() or an export of one) by "
                f"{sum(held.values())} read(s) of this process, which stay open until then",
                where=self._path,
                expected=_HOW,
                got=f"still referenced after {now - since:.0f} s",
            )
        if over:
            raise StoreError(
                "the map must change size but a read of another thread of this process did not end",
                where=self._path,
                expected=f"every store.read() block ended within {self._bound} s",
                got=f"{len(active)} open read(s)",
            )
