"""``CpstoreSaver`` and ``AsyncCpstoreSaver``: LangGraph checkpointers on a cpstore store.

Each LangGraph checkpoint is a cpstore checkpoint (run ``lg:<thread>``, a
branch per namespace and per fork), each channel value a content-addressed
state part, found through the LangGraph index (cpstore/store/lg_index.py).
Layout and guarantees: docs/langgraph.md.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import os
import random
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar
from uuid import UUID

from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
    PendingWrite,
    get_checkpoint_id,
    get_checkpoint_metadata,
)

import cpstore.store as _store
from cpstore.errors import InvalidInputError
from cpstore.langgraph import _maintain
from cpstore.langgraph._codec import (
    CHANNEL,
    load_value,
    loads_checked,
    msgpack_options,
    pack_typed,
    part_loader,
)
from cpstore.langgraph._loader import Loader
from cpstore.langgraph._read import (
    Entry,
    entry_at,
    id_after,
    load_parts,
    ns_prefix,
    stored,
    stored_writes,
)
from cpstore.langgraph._write import Writer
from cpstore.native.kept import kept_contextmanager
from cpstore.store import Store
from cpstore.store.lg_index import (
    CHECKPOINT_PREFIX,
    checkpoint_key,
    over_limit,
    pack,
    scan,
    write_key,
)

__all__ = ["AsyncCpstoreSaver", "CpstoreSaver"]

T = TypeVar("T")
_BATCH = 128


def _target(config: Mapping[str, Any]) -> tuple[str, str, str | None]:
    # type() first: a dict is a Mapping, and the ABC check is the slow part of a get
    conf = (
        config.get("configurable") if type(config) is dict or isinstance(config, Mapping) else None
    )
    if not (type(conf) is dict or isinstance(conf, Mapping)) or conf.get("thread_id") is None:
        raise InvalidInputError(
            "a LangGraph config needs configurable.thread_id", got=repr(config)[:80]
        )
    ns = conf.get("checkpoint_ns") or ""
    # A falsy id ("") names no checkpoint: the newest is read, a put is a root, as in
    # LangGraph's own savers and its Pregel loop ("a truthy checkpoint_id"); taken as an
    # id, get_tuple found none and a graph started its thread over (review70).
    checkpoint_id = conf.get("checkpoint_id")
    return str(conf["thread_id"]), str(ns), str(checkpoint_id) if checkpoint_id else None


class CpstoreSaver(BaseCheckpointSaver[str]):  # type: ignore[misc]
    """A LangGraph checkpointer storing into a cpstore store (sync, with async twins).

    ``CpstoreSaver(store)`` wraps an open :class:`~cpstore.store.Store` (the
    caller closes it); ``with CpstoreSaver.from_conn_string(path) as saver``
    opens one and closes it on exit. The async twins run the sync methods in
    the event loop's default executor, so the loop is never blocked by a store call.
    """

    def __init__(self, store: Store, *, serde: Any = None) -> None:
        if not isinstance(store, Store):
            raise InvalidInputError("CpstoreSaver wraps a cpstore Store", got=type(store).__name__)
        if store.durability == "batched":
            # A queued checkpoint is invisible to reads until the batch commits,
            # and LangGraph reads back what it just put.
            raise InvalidInputError(
                "a LangGraph saver needs a store that commits every put",
                expected=["sync", "none"],
                got="batched",
            )
        super().__init__(serde=serde)
        self.store = store
        self._writer = Writer(store, self.serde)
        #: (serde, its loads_typed, part_loader(serde), msgpack_options(serde)): built
        #: once, rebuilt when ``self.serde`` or its ``loads_typed`` is replaced.
        self._loader_of: tuple[
            Any, Any, Callable[[Any, str], Any], tuple[Callable[..., Any], int] | None
        ] = _loaders_of(self.serde)

    def _writer_now(self) -> Writer:
        """The put path through ``self.serde`` as it is now: LangGraph assigns a saver's
        ``serde`` (``with_allowlist``'s clone, which ``compile`` makes), and so may a
        user; the writer made with the first one kept storing through it (review70:
        an ``EncryptedSerializer`` assigned later encrypted the writes, not the
        checkpoints)."""
        writer = self._writer
        return writer if writer.serde is self.serde else writer.with_serde(self.serde)

    def _loader(self, txn: Any, *, share: bool = True) -> Loader:
        """A Loader on ``txn`` with this saver's serde and its cached part loader.

        The loaders are rebuilt when the serde's ``loads_typed`` is another function
        than when they were built (patched on the instance or the class since), or,
        for the exact default serde, its ``_unpack_ext_hook`` (which its
        ``loads_typed`` reads at each call) is another object: a read always decodes
        as ``serde.loads_typed`` would now (audit23, audit24).
        """
        serde = self.serde
        held = self._loader_of
        opts = held[3]
        if (
            held[0] is not serde
            or held[1] != _loads_of(serde)
            or (opts is not None and opts[0] is not getattr(serde, "_unpack_ext_hook", None))
        ):
            held = self._loader_of = _loaders_of(serde)
        return Loader(txn, self.store, serde, held[2], held[3], share=share)

    @classmethod
    @kept_contextmanager
    def from_conn_string(
        cls, conn_string: str | os.PathLike[str], *, serde: Any = None, **options: Any
    ) -> Iterator[CpstoreSaver]:
        """Open ``cpstore.open(conn_string, **options)``, yield a saver, close the store on exit.

        A ``kept_contextmanager``: an interrupt (a signal handler's exception) landing on
        contextlib's ``next()`` return in ``__enter__`` kept the opened store open, its
        handle counted, while the caller kept the exception (intr88)."""
        store = _store.open(conn_string, **options)
        try:
            yield cls(store, serde=serde)
        finally:
            store.close()

    # -- reads -----------------------------------------------------------------

    def get_tuple(self, config: Any) -> CheckpointTuple | None:
        """The checkpoint ``config`` names (its ``checkpoint_id``, else the newest), or None."""
        thread_id, ns, checkpoint_id = _target(config)
        backend = self.store.backend
        with backend.read_txn() as txn:
            entry = entry_at(txn, backend.db("meta"), thread_id, ns, checkpoint_id)
            if entry is None:
                return None
            return self._loader(txn, share=False).tuple(entry)

    def list(
        self,
        config: Any,
        *,
        filter: dict[str, Any] | None = None,
        before: Any = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Checkpoints newest first per namespace, filtered by metadata, ``before``, ``limit``."""
        #: (thread, ns) every key under the prefix holds, when the config names both.
        names: tuple[str, str] | None = None
        if config is not None:
            thread_id, _, checkpoint_id = _target(config)
            ns = config["configurable"].get("checkpoint_ns")
            try:
                if ns is None:
                    prefix = checkpoint_key(thread_id)
                else:
                    names = (thread_id, str(ns))
                    prefix = ns_prefix(*names)
            except InvalidInputError:
                if not over_limit(thread_id, "" if ns is None else str(ns)):
                    raise
                # longer than a put may name, but an older release stored such names
                # (PostgreSQL took any length): what is stored is listed; LMDB has none
                ns_ = None if ns is None else str(ns)
                prefix = checkpoint_key(thread_id, ns_, sized=False)
        else:
            prefix, checkpoint_id = CHECKPOINT_PREFIX, None
        at = len(prefix)
        before_id = (get_checkpoint_id(before) or None) if before else None
        backend = self.store.backend
        meta = backend.db("meta")
        left = limit
        below: bytes | None = None
        while left is None or left > 0:
            batch: list[CheckpointTuple] = []
            with backend.read_txn() as txn:
                loader = self._loader(txn)
                seen = 0
                for key, value in scan(txn, meta, prefix, reverse=True, below=below):
                    below, seen = key, seen + 1
                    if not _wanted(key, checkpoint_id, before_id):
                        continue
                    tup = loader.tuple(
                        Entry.decode(key, value)
                        if names is None
                        else Entry.decode(key, value, (*names, id_after(key, at)))
                    )
                    if tup is None or not _matches(tup.metadata, filter):
                        continue
                    batch.append(tup)
                    if left is not None:
                        left -= 1
                        if left <= 0:
                            break
                    if seen >= _BATCH:
                        break
                done = seen < _BATCH or (left is not None and left <= 0)
            yield from batch
            if done:
                return

    # -- writes ----------------------------------------------------------------

    def put(
        self,
        config: Any,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> dict[str, Any]:
        """Store a checkpoint (and its index entry, one txn); return the config naming it."""
        thread_id, ns, parent_id = _target(config)
        metadata = get_checkpoint_metadata(config, metadata)
        writer = self._writer  # _writer_now(), inline: one call less a put (saver87)
        if writer.serde is not self.serde:
            writer = writer.with_serde(self.serde)
        checkpoint_id = writer.put(
            thread_id, ns, parent_id,
            checkpoint=checkpoint, metadata=metadata, new_versions=new_versions,
        )  # fmt: skip
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint_id,
            }
        }

    def put_writes(
        self,
        config: Any,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's writes for a checkpoint; special (negative-index) writes replace."""
        thread_id, ns, checkpoint_id = _target(config)
        if checkpoint_id is None:  # absent or "": writes no read could reach
            raise InvalidInputError(
                "put_writes needs a non-empty configurable.checkpoint_id", got=repr(config)[:80]
            )
        records: list[tuple[bytes, bytes, bool]] = []
        for idx, (channel, value) in enumerate(writes):
            at = WRITES_IDX_MAP.get(channel, idx)
            key = write_key(thread_id, ns, checkpoint_id, str(task_id), at)
            kind, data = self.serde.dumps_typed(value)
            pack_typed((kind, data))  # the same checks as a state part
            body = [str(task_path), str(task_id), at, str(channel), kind, bytes(data)]
            records.append((key, pack(key, body), at >= 0))
        backend = self.store.backend
        meta = backend.db("meta")

        def write(txn: Any) -> None:
            for key, value, keep_first in records:
                if keep_first and txn.get(key, db=meta) is not None:
                    continue
                txn.put(key, value, db=meta)

        backend.write_txn(write)

    def get_next_version(self, current: str | int | None, channel: None = None) -> str:
        """The next channel version: a zero-padded counter and a random tail, as InMemorySaver."""
        if current is None:
            current_v = 0
        elif isinstance(current, int):
            current_v = current
        else:
            current_v = int(str(current).split(".")[0])
        return f"{current_v + 1:032}.{random.random():016}"

    def get_delta_channel_history(
        self, *, config: Any, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Per channel: writes on the parent chain oldest first, and the nearest stored value."""
        if not channels:
            return {}
        thread_id, ns, checkpoint_id = _target(config)
        backend = self.store.backend
        meta = backend.db("meta")
        collected: dict[str, list[PendingWrite]] = {c: [] for c in channels}
        seeds: dict[str, Any] = {}
        remaining = set(channels)
        with backend.read_txn() as txn:
            target = entry_at(txn, meta, thread_id, ns, checkpoint_id)
            parent = None if target is None else target.parent
            seen = set() if target is None else {target.checkpoint_id}  # links may loop
            while parent is not None and remaining and parent not in seen:
                seen.add(parent)
                entry = entry_at(txn, meta, thread_id, ns, parent)
                if entry is None or not stored(txn, self.store, entry):
                    break
                ends = [c for c in remaining if c in entry.have]
                where = f"pending writes of thread {thread_id!r} checkpoint {entry.checkpoint_id}"
                for w in reversed(stored_writes(txn, meta, thread_id, ns, entry.checkpoint_id)):
                    if w.channel in remaining:
                        collected[w.channel].append(
                            (w.task_id, w.channel, loads_checked(self.serde, w.typed, where))
                        )
                if ends:
                    parts = load_parts(txn, self.store, entry)
                    for c in ends:
                        seeds[c] = load_value(
                            self.serde, parts, c, f"{CHANNEL}{c} of {entry.cid.hex()}"
                        )
                        remaining.discard(c)
                parent = entry.parent
        out: dict[str, DeltaChannelHistory] = {}
        for c in channels:
            item: DeltaChannelHistory = {"writes": list(reversed(collected[c]))}
            if c in seeds:
                item["seed"] = seeds[c]
            out[c] = item
        return out

    # -- maintenance -----------------------------------------------------------

    def delete_thread(self, thread_id: str) -> None:
        """Delete every checkpoint and write of a thread (all namespaces), and sweep its run."""
        threads = [_maintain.thread_id_of(thread_id, "thread_id")]  # None names none
        _maintain.delete_threads(self.store, self._writer_now(), threads)

    def delete_for_runs(self, run_ids: Sequence[str | UUID]) -> None:
        """Delete the checkpoints (and their writes) whose metadata ``run_id`` is listed.

        Each run id is a str or a ``uuid.UUID`` (as its str); anything else, or one str
        for ``run_ids``, is ``InvalidInputError`` and nothing is deleted."""
        _maintain.delete_for_runs(self.store, self._writer_now(), run_ids)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy every checkpoint and write of a thread to another; no value bytes are copied."""
        source = _maintain.thread_id_of(source_thread_id, "source_thread_id")
        target = _maintain.thread_id_of(target_thread_id, "target_thread_id")
        _maintain.copy_thread(self.store, self._writer_now(), source, target)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest`` per namespace (and the ancestors DeltaChannel needs), or ``delete``."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidInputError(
                "unknown prune strategy", expected=["keep_latest", "delete"], got=strategy
            )
        threads = _maintain.thread_ids_of(thread_ids)  # one str is refused, not its letters
        if strategy == "delete":
            _maintain.delete_threads(self.store, self._writer_now(), threads)
        else:
            _maintain.keep_latest(self.store, self._writer_now(), threads)

    # -- async twins -----------------------------------------------------------

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await _settled(functools.partial(fn, *args, **kwargs))

    async def aget_tuple(self, config: Any) -> CheckpointTuple | None:
        """:meth:`get_tuple` in the default executor."""
        return await self._run(self.get_tuple, config)

    async def alist(
        self,
        config: Any,
        *,
        filter: dict[str, Any] | None = None,
        before: Any = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """:meth:`list` in the default executor, a batch at a time."""
        it = self.list(config, filter=filter, before=before, limit=limit)
        while True:
            batch = await self._run(_take, it, _BATCH)
            for tup in batch:
                yield tup
            if len(batch) < _BATCH:
                return

    async def aput(
        self,
        config: Any,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> dict[str, Any]:
        """:meth:`put` in the default executor."""
        return await self._run(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: Any,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """:meth:`put_writes` in the default executor."""
        await self._run(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """:meth:`delete_thread` in the default executor."""
        await self._run(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str | UUID]) -> None:
        """:meth:`delete_for_runs` in the default executor."""
        await self._run(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """:meth:`copy_thread` in the default executor."""
        await self._run(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """:meth:`prune` in the default executor."""
        await self._run(self.prune, thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: Any, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """:meth:`get_delta_channel_history` in the default executor."""
        return await self._run(self.get_delta_channel_history, config=config, channels=channels)


class AsyncCpstoreSaver(CpstoreSaver):
    """The async-first saver: ``async with AsyncCpstoreSaver.from_conn_string(path) as saver``.

    Every method of :class:`CpstoreSaver`; the ``a``-prefixed ones run the store
    work in the default executor.
    """

    @classmethod
    @asynccontextmanager
    async def from_conn_string(  # type: ignore[override]
        cls, conn_string: str | os.PathLike[str], *, serde: Any = None, **options: Any
    ) -> AsyncIterator[AsyncCpstoreSaver]:
        """Open the store at ``conn_string`` off the loop, yield a saver, close it on exit
        (again after an interrupt, a signal handler's exception: one landing in ``_settled``
        before the close reached the executor ran none of it, the store open for good)."""
        store = await _settled(functools.partial(_store.open, conn_string, **options), undo=_close)
        try:
            yield cls(store, serde=serde)
        finally:
            # Inline (a landing at a helper's start would run none of it; left90). A close
            # of a closed store returns at once, one beside a running close waits for it.
            late: BaseException | None = None
            while True:
                try:
                    await _settled(store.close, abandon=False)
                except (Exception, asyncio.CancelledError) as exc:
                    # The close's own failure (it ran), or a cancellation (_settled waited
                    # for the close to end): raised, the interrupt before it noted.
                    if late is not None:
                        exc.add_note(f"the close ran again after {type(late).__name__}: {late}")
                    raise
                except BaseException as exc:  # KeyboardInterrupt, SystemExit: close again
                    late = exc
                    continue
                break
            if late is not None:
                raise late


async def _settled(
    fn: Callable[[], T], *, undo: Callable[[T], object] | None = None, abandon: bool = True
) -> T:
    """``fn()`` in the running loop's default executor; a cancellation settles it first.

    Cancelled before an executor thread took it, ``fn`` never runs. Cancelled once it
    runs (a put waiting for the writer lock another process holds, its commit), the
    CancelledError is raised only when ``fn`` has ended (further cancellations meanwhile
    are absorbed), so what the cancelled call stored is what any later read sees, and no
    store work of it is left running under a ``close()`` (audit64: the put went on in
    the executor, and a read right after the CancelledError missed a checkpoint that
    appeared later). ``undo(result)`` runs (settled) when ``fn`` returned but the call
    was cancelled: an opened store is closed, not leaked. ``abandon=False`` (a close, and
    every ``undo``) runs ``fn`` even when cancelled before a thread took it, and waits
    for it: cancelled again while the close of a cancelled open (or of the saver's
    block) still waited in the executor's queue, the store was left open (review66).
    """
    loop = asyncio.get_running_loop()
    gate = threading.Lock()
    began = [False, False]  # [started, abandoned]

    def call() -> T:
        with gate:
            if began[1] and abandon:
                raise _AbandonedError  # cancelled before it began: never runs
            began[0] = True
        return fn()

    fut = loop.run_in_executor(None, call)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        with gate:
            began[1] = True
            started = began[0] or not abandon
        fut.add_done_callback(_retrieved)
        while started and not fut.done():
            try:
                await asyncio.shield(fut)
            except asyncio.CancelledError:
                continue  # cancelled again: fn still runs, and is waited for
            except BaseException:  # fn failed: reported as cancelled, its error noted below
                break
        failed = fut.exception() if fut.done() and not fut.cancelled() else None
        notes = []
        if failed is not None and not isinstance(failed, _AbandonedError):
            # The caller sees the cancellation; what the call it cancelled ended in (an
            # OutcomeUnknownError: "may or may not be stored") is not hidden (audit64).
            notes.append(f"the cancelled call ended in {type(failed).__name__}: {failed}")
        if undo is not None and fut.done() and not fut.cancelled() and failed is None:
            try:
                await _settled(functools.partial(undo, fut.result()), abandon=False)
            except Exception as exc:  # the undo's failure is noted, the cancellation stays
                notes.append(f"undoing the cancelled call failed: {type(exc).__name__}: {exc}")
        cancel = sys.exc_info()[1]
        if cancel is not None:
            for note in notes:
                cancel.add_note(note)
        raise


class _AbandonedError(Exception):
    """The outcome of a call cancelled before an executor thread took it (never seen)."""


def _retrieved(fut: asyncio.Future[Any]) -> None:
    """Mark a cancelled call's outcome seen (its CancelledError was raised instead)."""
    if not fut.cancelled():
        fut.exception()


def _close(store: Store) -> None:
    store.close()


def _loads_of(serde: Any) -> Any:
    """What ``serde.loads_typed`` is now: the instance's own, else the class's function."""
    own = getattr(serde, "__dict__", None)
    if own is not None and "loads_typed" in own:
        return own["loads_typed"]
    return getattr(type(serde), "loads_typed", None)


def _loaders_of(
    serde: Any,
) -> tuple[Any, Any, Callable[[Any, str], Any], tuple[Callable[..., Any], int] | None]:
    return serde, _loads_of(serde), part_loader(serde), msgpack_options(serde)


def _take(it: Iterator[T], n: int) -> list[T]:
    return list(itertools.islice(it, n))


def _wanted(key: bytes, checkpoint_id: str | None, before_id: str | None) -> bool:
    if checkpoint_id is None and before_id is None:
        return True
    cid = Entry.id_of(key)
    if checkpoint_id is not None and cid != checkpoint_id:
        return False
    return before_id is None or cid < before_id


def _matches(metadata: Mapping[str, Any], filter: Mapping[str, Any] | None) -> bool:
    return not filter or all(metadata.get(k) == v for k, v in filter.items())
