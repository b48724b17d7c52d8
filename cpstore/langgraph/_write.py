"""Writing LangGraph checkpoints: each one a cpstore checkpoint plus its index entry, one txn.

A put continues the branch whose head is its parent (the common case: one
recorder per branch, kept between puts, so unchanged channel values are
neither re-serialized nor re-hashed), or forks a new branch from the parent
(time travel, ``update_state`` on an older checkpoint, a parent another
process moved past). The checkpoint's head (LangGraph's ``checkpoint`` and ``metadata``) goes
into the manifest's metadata (layout 2, ``_codec.pack_head``); the channel values are
its state parts. The index entry is written in the commit txn of the
checkpoint itself (``Recorder.checkpoint(extra_meta=)``): a crash leaves both
or neither. A lost ref race (another process moved the branch) is retried,
and then forks.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple

from cpstore.errors import ConflictError, IntegrityError, NotFoundError, StoreError
from cpstore.langgraph._codec import (
    CHANNEL,
    HASHED_RUN,
    HEAD_KEY,
    branch_label,
    channel_parts,
    fork_branch,
    load_checkpoint,
    pack_head,
    pack_typed,
    pack_value,
    run_for,
    run_id_of,
    thread_runs,
)
from cpstore.langgraph._read import Entry, entry_key, load_parts
from cpstore.store import Store
from cpstore.store.backend import Txn
from cpstore.store.content import records_of
from cpstore.store.lg_index import checkpoint_key, pack, scan
from cpstore.store.model import ref_key
from cpstore.store.recorder import Recorder

__all__ = ["Writer", "own_run", "root_run"]

_EMPTY = pack_typed(("empty", b""))


def _empty(channel: str) -> dict[str, bytes]:
    return {CHANNEL + channel: _EMPTY}


#: (version, the channel's parts, whether it holds a value: not the empty marker).
_Held = tuple[Any, dict[str, bytes], bool]

_CACHED_BRANCHES = 256
_RETRIES = 8
#: Serde views (``Writer.with_serde``) kept per writer: the saver's assigned serde and a
#: few ``with_allowlist`` clones' (each a strong reference, so an id is never reused).
_CACHED_VIEWS = 8


@dataclass
class _Branch:
    """A branch this process records on: its recorder and the last checkpoint's values."""

    recorder: Recorder
    #: channel -> (version, its parts: the bytes objects the recorder last hashed,
    #: whether it holds a value: not the empty marker).
    values: dict[str, _Held] = field(default_factory=dict)
    #: part name -> bytes of the last checkpoint (equal bytes reuse the object: no re-hash).
    last: dict[str, bytes] = field(default_factory=dict)
    #: The channels of ``values`` holding a value, sorted (the index entry's ``have``).
    have: list[str] = field(default_factory=list)
    #: (thread, ns, checkpoint id) of the head this writer recorded last.
    tip: tuple[str, str, str] | None = None
    #: The index entry's bytes this writer wrote for ``tip`` (a put continuing the tip
    #: expects them in its txn: lghunt102).
    tip_entry: bytes | None = None


class Put(NamedTuple):
    """One checkpoint to record: where, and its parts (immutable, built in one call)."""

    thread_id: str
    ns: str
    parent_id: str | None
    checkpoint_id: str
    step: int
    #: ``metadata["run_id"]`` when it is a str or a UUID (``_codec.run_id_of``).
    run_id: str | None
    #: The ``checkpoint`` and ``metadata`` parts.
    head_parts: Mapping[str, bytes]
    #: channel -> its value's parts, for the channels of new versions.
    fresh: Mapping[str, Mapping[str, bytes]]
    versions: Mapping[str, Any]
    #: The caller's channel values (serialized only when needed).
    values: Mapping[str, Any]
    #: Channels of new versions to serialize from ``values`` (absent: the empty marker).
    new: frozenset[str] = frozenset()
    #: The index entry this put replaces, as read (a prune re-recording a kept
    #: checkpoint): recorded only while the entry still holds it, else ConflictError.
    expect_entry: bytes | None = None
    #: Index records written (a value) or deleted (None) in the checkpoint's own txn (a
    #: copy: the source's pending writes, and the target's own under this id dropped).
    records: tuple[tuple[bytes, bytes | None], ...] = ()


#: ``Put.fresh`` of a put made from a LangGraph checkpoint (none: its values are packed).
_NO_FRESH: Mapping[str, Mapping[str, bytes]] = MappingProxyType({})
#: ``tuple.__new__``: a NamedTuple of all its fields in order, without its Python ``__new__``
#: (every field spelt out: tests/test_saver87_put_cpu.py pins ``Put``'s and ``_Plan``'s).
_new_tuple = tuple.__new__


class _Plan(NamedTuple):
    run: str
    branch: str
    #: The cpstore checkpoint a new branch forks from (None: continue, or a root).
    fork_from: str | None
    new_branch: bool
    #: The parent's entry when the parent is indexed.
    parent: Entry | None


class Writer:
    """The put path of one saver (one lock: puts of one saver are serialized)."""

    def __init__(self, store: Store, serde: Any, *, share: Writer | None = None) -> None:
        self.store = store
        self.serde = serde
        # another serde's view (``with_serde``) shares the lock and caches
        self.lock: threading.Lock = threading.Lock() if share is None else share.lock
        self._branches: OrderedDict[tuple[str, str], _Branch] = (
            OrderedDict() if share is None else share._branches
        )
        # (thread, ns, checkpoint id) -> (run, branch) of each cached branch's head
        # this writer recorded: a put whose parent is one continues that branch
        # without a planning read (the commit's ref CAS still proves the head).
        self._tips: dict[tuple[str, str, str], tuple[str, str]] = (
            {} if share is None else share._tips
        )
        # id(serde) -> (serde, its view), shared by every view, oldest first; written
        # only under the lock
        self._views: OrderedDict[int, tuple[Any, Writer]] = (
            OrderedDict() if share is None else share._views
        )

    def with_serde(self, serde: Any) -> Writer:
        """This writer when it has ``serde``, else one that encodes and decodes through
        ``serde`` and shares this one's lock and cached branches (a saver whose ``serde``
        was assigned after it was made, or ``with_allowlist``'s shallow clone).

        One view per serde object (by identity, the object held so its id is not reused),
        so every put through an unchanged assigned serde takes the same view (lgfix72:
        each put built a new one); a serde assigned since gets its own at its first call.
        A kept view is looked up without the lock (one dict read: a put through it does
        not wait for the lock twice); a new one is made and kept under it, so threads
        asking at once get one view.
        """
        if serde is self.serde:
            return self
        held = self._views.get(id(serde))
        if held is not None and held[0] is serde:
            return held[1]
        with self.lock:
            held = self._views.get(id(serde))
            if held is not None and held[0] is serde:
                return held[1]
            view = Writer(self.store, serde, share=self)
            self._views[id(serde)] = (serde, view)
            while len(self._views) > _CACHED_VIEWS:  # the oldest made goes first
                self._views.popitem(last=False)
            return view

    def forget(self, run: str | None = None) -> None:
        """Drop cached recorders (of one run, or all): the store changed under them."""
        with self.lock:
            for key in [k for k in self._branches if run is None or k[0] == run]:
                self._drop(*key)

    def put(
        self,
        thread_id: str,
        ns: str,
        parent_id: str | None,
        *,
        checkpoint: Mapping[str, Any],
        metadata: Mapping[str, Any],
        new_versions: Mapping[str, Any],
    ) -> str:
        """Store one checkpoint; return its LangGraph id."""
        c = dict(checkpoint)
        values: Mapping[str, Any] = c.pop("channel_values", None) or {}
        checkpoint_id = str(c["id"])
        versions: Mapping[str, Any] = c.get("channel_versions") or {}
        new = frozenset(versions.keys() & new_versions.keys())
        dumps = self.serde.dumps_typed
        head_parts = {
            "checkpoint": pack_typed(dumps(c)),
            # a dict as it is (get_checkpoint_metadata's own): the same bytes, no copy
            "metadata": pack_typed(dumps(metadata if type(metadata) is dict else dict(metadata))),
        }
        step = metadata.get("step")
        step = step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else 0
        run_id = metadata.get("run_id")
        # tuple.__new__: the Put of these fields (defaults spelt out) without the
        # NamedTuple's Python-level __new__ (saver87)
        return self.commit(
            _new_tuple(
                Put,
                (
                    thread_id,
                    ns,
                    parent_id,
                    checkpoint_id,
                    step,
                    run_id if type(run_id) is str else run_id_of(run_id),
                    head_parts,
                    _NO_FRESH,
                    versions,
                    values,
                    new,
                    None,
                    (),
                ),
            )
        )

    def commit(self, put: Put) -> str:
        """Record the parts and the index entry in one txn; return the LangGraph id."""
        thread_id, ns, parent_id, checkpoint_id = (
            put.thread_id,
            put.ns,
            put.parent_id,
            put.checkpoint_id,
        )
        head_parts, fresh, versions, values = put.head_parts, put.fresh, put.versions, put.values
        run_id = put.run_id
        key = entry_key(thread_id, ns, checkpoint_id)
        # Layout 2: the head in the manifest's metadata (covered by the checkpoint id),
        # not two state parts: two objects fewer to encode, hash, index and write.
        head = {HEAD_KEY: pack_head(head_parts["checkpoint"], head_parts["metadata"])}
        with self.lock:
            for attempt in range(_RETRIES):
                tip = None if parent_id is None else self._tips.get((thread_id, ns, parent_id))
                cached = None if tip is None or attempt else self._branches.get(tip)
                parent_expect: tuple[tuple[bytes, bytes], ...] = ()
                if (
                    cached is not None
                    and tip is not None
                    and cached.tip_entry is not None
                    and cached.tip == (thread_id, ns, parent_id)
                ):
                    # the tip of a cached branch: continue it (what _branch returns for
                    # this plan, without the call; saver87), expecting the parent's entry
                    # as this writer wrote it: another writer that put the parent's id
                    # again (its entry naming another checkpoint) leaves this branch's
                    # head as it was, so only the entry tells (lghunt102)
                    plan = _new_tuple(_Plan, (tip[0], tip[1], None, False, None))
                    self._branches.move_to_end(tip)
                    branch = cached
                    parent_expect = ((entry_key(thread_id, ns, str(parent_id)), cached.tip_entry),)
                else:
                    plan = self._plan(thread_id, ns, parent_id, checkpoint_id, attempt)
                    try:
                        branch = self._branch(plan)
                    except ConflictError:  # the branch was made or moved since the plan read
                        continue
                parts: dict[str, bytes] = {}
                held_by: dict[str, _Held] = {}
                inherited: dict[str, tuple[Any, dict[str, bytes]]] | None = None
                lost: NotFoundError | None = None  # the parent's parts, swept meanwhile
                last_values = {} if plan.new_branch else branch.values
                replan = False
                # locals, not attribute lookups at each channel (saver87)
                new, serde, last = put.new, self.serde, branch.last
                regroup = plan.new_branch  # whether ``have`` must be built again
                # channels whose parts are never the last checkpoint's as they are
                made = new if not fresh else new | fresh.keys()
                for k, version in versions.items():
                    known = last_values.get(k)
                    if known is not None and known[0] == version and k not in made:
                        # The last checkpoint's parts, the very objects the
                        # recorder hashed: nothing to compare or re-key.
                        held_by[k] = known
                        parts.update(known[1])
                        continue
                    chan = fresh.get(k) if fresh else None
                    if chan is None and k in new:
                        chan = pack_value(serde, k, values[k], last) if k in values else _empty(k)
                    elif chan is None:
                        # The value stored at this version (the parent's part) before
                        # the caller's: a value mutated in place without a new version
                        # reads as LangGraph's savers read it, whether or not this
                        # writer recorded the parent (review70: a cold put stored it).
                        if inherited is None:
                            try:
                                inherited = self._parent_parts(
                                    plan.parent or self._entry(thread_id, ns, parent_id)
                                )
                            except NotFoundError as e:
                                if plan.parent is not None:
                                    # The planned parent was swept since the recorder was
                                    # made from it (a keep_latest moved it to a kept
                                    # copy): plan again, as a recorder made after the
                                    # sweep does.
                                    self._drop(plan.run, plan.branch)
                                    replan = True
                                    break
                                inherited, lost = {}, e
                        held = inherited.get(k)
                        if held is not None and held[0] == version:
                            chan = held[1]
                        elif k in values:
                            chan = pack_value(serde, k, values[k], last)
                        elif lost is not None:
                            raise lost
                    if chan is not None:
                        # _same() of each part, inline: no call per part (saver87)
                        same: dict[str, bytes] = {}
                        for n, b in chan.items():
                            o = last.get(n)
                            same[n] = o if o is not None and o == b else b
                        chan = same
                        flag = chan[CHANNEL + k] != _EMPTY
                        held_by[k] = (version, chan, flag)
                        parts.update(chan)
                        if not regroup:
                            prev = last_values.get(k)
                            regroup = prev is None or prev[2] != flag
                if replan:
                    continue
                # A held channel's flag was computed when its parts were made: an
                # unchanged channel's bytes are not looked up and compared again. The
                # same channels holding values as at the last checkpoint (each one a
                # known channel or a flag compared above, and no channel gone): the
                # last checkpoint's sorted list, not a new one (saver87).
                if regroup or len(held_by) != len(last_values):
                    have = sorted([k for k, h in held_by.items() if h[2]])
                else:
                    have = branch.have

                written: list[bytes] = []  # the entry's bytes, once extra() made them

                def extra(
                    cid: bytes,
                    *,
                    plan: _Plan = plan,
                    have: list[str] = have,
                    written: list[bytes] = written,
                ) -> list[tuple[bytes, bytes | None]]:
                    # Entry.body_of() of the entry, its map spelt out: no call, and
                    # ``have`` (a list nobody changes) not copied (saver87; the
                    # entry's bytes are pinned by tests/test_langgraph_put_bytes.py).
                    body = {
                        "cp": bytes(cid),
                        "run": plan.run,
                        "branch": plan.branch,
                        "parent": parent_id,
                        "run_id": run_id,
                        "have": have,
                    }
                    written.append(pack(key, body))
                    return [(key, written[-1]), *put.records]

                expect = () if put.expect_entry is None else ((key, put.expect_entry),)
                try:
                    branch.recorder.checkpoint(
                        put.step,
                        parts,
                        metadata=head,
                        extra_meta=extra,
                        meta_expected=expect + parent_expect,
                    )
                except ConflictError:
                    # Another process moved the branch (or pruned the fork
                    # parent): plan again from what the store holds now.
                    self._drop(plan.run, plan.branch)
                    if expect and self._stored_entry(key) != put.expect_entry:
                        raise  # the entry it replaces changed (deleted): not ours to write
                    continue
                branch.values = held_by
                branch.have = have
                branch.last = parts
                if branch.tip is not None:
                    self._tips.pop(branch.tip, None)
                branch.tip = (thread_id, ns, checkpoint_id)
                branch.tip_entry = written[-1] if written else None
                self._tips[branch.tip] = (plan.run, plan.branch)
                return checkpoint_id
        raise StoreError(
            "could not record the checkpoint: its branch kept moving",
            where=f"thread {thread_id!r} ns {ns!r} checkpoint {checkpoint_id}",
            expected=f"a commit within {_RETRIES} tries",
            got=f"the branch moved {_RETRIES} times",
        )

    def _plan(
        self, thread_id: str, ns: str, parent_id: str | None, checkpoint_id: str, attempt: int
    ) -> _Plan:
        backend = self.store.backend
        meta = backend.db("meta")
        with backend.read_txn() as txn:
            parent: Entry | None = None
            if parent_id is not None:
                pkey = checkpoint_key(thread_id, ns, parent_id)
                raw = txn.get(pkey, db=meta)
                if raw is not None:
                    parent = Entry.decode(pkey, bytes(raw))
            if parent is not None and not records_of(backend.dbs).exists(txn, parent.cid):
                parent = None  # retention pruned it: record a root
            if parent is not None:
                head = backend.head(txn, ref_key(parent.run, parent.branch))
                if head == parent.cid:
                    return _Plan(parent.run, parent.branch, None, False, parent)
                run, fork_from = parent.run, parent.cid.hex()
            else:
                run, fork_from = root_run(txn, meta, thread_id), None
                label = branch_label(ns)
                if backend.head(txn, ref_key(run, label)) is None:
                    return _Plan(run, label, None, True, None)
            for n in range(attempt, attempt + 64):
                name = fork_branch(ns, checkpoint_id, n)
                if backend.head(txn, ref_key(run, name)) is None:
                    return _Plan(run, name, fork_from, True, parent)
        raise StoreError("no free fork branch name", where=f"thread {thread_id!r}")

    def _branch(self, plan: _Plan) -> _Branch:
        key = (plan.run, plan.branch)
        cached = self._branches.get(key)
        # A plan to continue the parent's branch holds the parent's cpstore checkpoint:
        # the recorder must extend exactly that one. The branch's head when the recorder
        # is made may be newer (another process moved it since the plan's read); a
        # recorder on that head would record the put as a child of a checkpoint it never
        # saw, or refuse it as a step backwards. Made from the parent, it raises
        # ConflictError instead: the put plans again and forks.
        at = None if plan.new_branch or plan.parent is None else plan.parent.cid.hex()
        if (
            cached is not None
            and not plan.new_branch
            and (at is None or cached.recorder.head == at)
        ):
            self._branches.move_to_end(key)
            return cached
        self._drop(*key)
        start = plan.fork_from or at
        try:
            rec = self.store.recorder(plan.run, branch=plan.branch, parent=start)
        except NotFoundError as e:
            if start is None:
                raise
            # The planned parent was swept since the plan's read (a delete_thread or
            # prune of another process): plan again, which finds it gone (a root).
            raise ConflictError(
                "the planned parent was swept since the plan read it",
                where=f"run {plan.run!r} branch {plan.branch!r}",
                expected=start,
                got=None,
            ) from e
        if plan.new_branch and plan.fork_from is None and rec.head is not None:
            # Planned as a new root branch (no head when the plan read it), but another
            # writer made it since (a prune's keep_latest records its kept checkpoint on
            # a free main): continuing its head would be a step backwards or a silent
            # adoption; plan again instead (audit19's race test met it in CI).
            rec.close()
            raise ConflictError(
                "the branch was made meanwhile",
                where=f"run {plan.run!r} branch {plan.branch!r}",
                expected=None,
                got=rec.head,
            )
        branch = _Branch(rec)
        self._branches[key] = branch
        while len(self._branches) > _CACHED_BRANCHES:
            self._drop(*next(iter(self._branches)))
        return branch

    def _drop(self, run: str, branch: str) -> None:
        cached = self._branches.pop((run, branch), None)
        if cached is not None:
            if cached.tip is not None:
                self._tips.pop(cached.tip, None)
            cached.recorder.close()

    def _entry(self, thread_id: str, ns: str, checkpoint_id: str | None) -> Entry | None:
        if checkpoint_id is None:
            return None
        backend = self.store.backend
        key = checkpoint_key(thread_id, ns, checkpoint_id)
        with backend.read_txn() as txn:
            raw = txn.get(key, db=backend.db("meta"))
            return None if raw is None else Entry.decode(key, bytes(raw))

    def _stored_entry(self, key: bytes) -> bytes | None:
        backend = self.store.backend
        with backend.read_txn() as txn:
            raw = txn.get(key, db=backend.db("meta"))
            return None if raw is None else bytes(raw)

    def _parent_parts(self, parent: Entry | None) -> dict[str, tuple[Any, dict[str, bytes]]]:
        """channel -> (the parent's version, its stored value's parts).

        A value the caller does not pass is the one stored at the same version
        (InMemorySaver's blob per version), which only the parent can hold here.
        """
        if parent is None:
            return {}
        with self.store.backend.read_txn() as txn:
            parts = load_parts(txn, self.store, parent)
        where = f"checkpoint {parent.cid.hex()}"
        cp = load_checkpoint(self.serde, parts["checkpoint"], where)
        parent_versions = cp.get("channel_versions") or {}
        return {
            k: (v, channel_parts(parts, k, where))
            for k, v in parent_versions.items()
            if CHANNEL + k in parts
        }


def root_run(txn: Txn[memoryview], meta: Any, thread_id: str) -> str:
    """The run a root checkpoint of ``thread_id`` (no stored parent) records on.

    A plain name (``lg:<thread>``) is the same in every release. A hashed one is the
    run the thread's index entries already name (the first in key order), else this
    release's ``run_for`` (``lg:#b2:<BLAKE2b-256>``): a thread an older release put on
    ``lg:#<XXH3-128>`` keeps that run for every new namespace and root. It is looked
    up in the index, by the whole thread id, never by whether the old run name exists:
    that run may be another thread's whose XXH3-128 meets this one's. An entry naming a
    run no release recorded the thread on (``lg_index.thread_runs``) is IntegrityError."""
    run = run_for(thread_id)
    if not run.startswith(HASHED_RUN):
        return run
    for key, value in scan(txn, meta, checkpoint_key(thread_id, sized=False)):
        return own_run(Entry.decode(key, value))
    return run


def own_run(e: Entry) -> str:
    """``e.run`` when it is a run a release records thread ``e.thread_id`` on
    (``lg_index.thread_runs``); else IntegrityError naming the entry: no saver wrote it,
    and following it would record on (and a delete or prune sweep) another thread's run."""
    if e.run not in thread_runs(e.thread_id):
        raise IntegrityError(
            "LangGraph index entry names a run that is not its thread's",
            where=f"thread {e.thread_id[:64]!r} ns {e.ns[:64]!r} id {e.checkpoint_id[:64]!r}",
            expected=f"one of {sorted(thread_runs(e.thread_id))}",
            got=e.run,
        )
    return e.run


def _same(old: bytes | None, new: bytes) -> bytes:
    """``old`` when it holds the same bytes: the recorder then skips encoding and hashing it."""
    return old if old is not None and old == new else new
