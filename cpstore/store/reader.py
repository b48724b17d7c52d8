"""The reader a replay engine uses: one checkpoint, inside one LMDB read txn.

``tokens()`` and ``token_values()`` return owned copies, every other accessor decoded
values or bytes. ``token_records()`` and ``token_value_views()`` point into the LMDB
map: CPython cannot revoke a memoryview's slices and exports, so the views they hand
out keep their read open while anything made from them outlives the block (kept_views.py:
a slice read later reads the recorded bytes, never a page reused or unmapped). The
package's own readers (validate, the replay cursor) take ``leased=True`` views: not
kept, checked against :attr:`CheckpointView.lease` before each use. Every object is
hash-checked on first use unless the reader was opened with ``verify=False``.
"""

from __future__ import annotations

import struct
from threading import get_ident
from typing import Any

from cpstore.errors import (
    CanonicalEncodingError,
    ForkError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    RecordingGapError,
)
from cpstore.native.binding import digest
from cpstore.native.records import kind_name, provenance_name
from cpstore.store.backend import FORKS as _FORKS
from cpstore.store.backend import LEASES as _LEASES
from cpstore.store.backend import Backend, Txn, forked_view
from cpstore.store.entries import absent_head
from cpstore.store.fast_read import contents, read_parts
from cpstore.store.kept_views import ReaderViews, release_views
from cpstore.store.manifest import Manifest, check_manifest_rest, decode_trusted, manifest_from_raw
from cpstore.store.model import Problem, created_at_of
from cpstore.store.objects import load_chunked, named_object
from cpstore.store.refs import RECORDED, check_ref_target, read_ref
from cpstore.store.verify import check_checkpoint_objects

__all__ = ["CheckpointView"]

_TOKEN_HEAD = struct.Struct("<QIB")
_OFFSET = struct.Struct("<Q")


class _NotOpen(dict[str, Any]):
    """The manifest map of a reader that was never entered: any use says so."""

    def __missing__(self, key: str) -> Any:
        raise InvalidInputError(
            "the checkpoint reader is not open",
            expected="with store.read(checkpoint_id) as cp: ...",
            got=f"use of {key!r} outside the with block",
        )

    def get(self, key: str, default: Any = None) -> Any:
        return self[key]


_NOT_OPEN = _NotOpen()


class CheckpointView:
    """One checkpoint's manifest, logs, payloads and state, inside one read txn.

    From :meth:`Store.read` or :meth:`Store.latest`; use it as a context
    manager. Entering begins the txn and reads the manifest (hash-checked
    unless ``verify=False``); leaving ends the txn, and any later use of the
    reader or of a cursor built from it raises :class:`InvalidInputError`.
    What it hands out (copies, decoded values) stays valid. A reader is
    entered once. Given ``txn`` (a read txn its caller owns and ends, as
    :func:`~cpstore.store.history.history_states` does), it reads in that txn
    and leaving the block leaves the txn open.
    """

    __slots__ = (
        "_built",
        "_cache",
        "_checked",
        "_checked_parts",
        "_cid",
        "_entered",
        "_fork",
        "_head",
        "_header",
        "_hints",
        "_id",
        "_lease",
        "_objects",
        "_owner",
        "_raw",
        "_rest_checked",
        "_store",
        "_txn",
        "_verify",
        "_views",
        "_who",
    )

    def __init__(
        self,
        store: Backend,
        cid: bytes | None,
        verify: bool,  # positional too: Store.read's (perf99, a class called with a keyword
        *,  # gets a dict its __init__ parses: ~1k instructions a read)
        head: tuple[bytes, str, str] | None = None,
        txn: Txn[memoryview] | None = None,
    ) -> None:
        self._store = store
        self._txn: Txn[memoryview] | None = None
        self._fork = _FORKS[0]  # of the process that entered it (_not_live)
        # A txn the caller owns (a history walk reads many checkpoints in one):
        # entering uses it, leaving closes the reader but leaves the txn open.
        self._owner = txn
        self._entered = False
        self._objects: Any = None  # the objects' Content, from the store's tables on entry
        self._cid = cid or b""
        self._head = head  # (ref key, run id, branch) for Store.latest
        self._raw: dict[str, Any] = _NOT_OPEN
        self._rest_checked = False  # state is checked on entry, the rest on first use
        self._header = b""
        self._built: Manifest | None = None
        self._id: str | None = None
        self._verify = verify
        # The map's views read; a ReaderViews once one is handed out (kept_views.py).
        self._views: list[memoryview] = []
        # Non-empty exactly while the txn is open. Objects built from this
        # reader (the replay cursor) keep a reference and test its truth
        # before touching a view of the map: one cheap check per call.
        self._lease: list[bool] = []
        self._cache: dict[str, Any] = {}
        # Objects hash-checked in this txn: none is hashed twice by one reader.
        self._checked: set[bytes] = set()
        # The parts map of a fast whole-state read: all hash-checked, merged
        # into _checked only when something looks there (most readers never do).
        self._checked_parts: dict[str, bytes] | None = None
        # The record's location hints (content.py): only a verified read tries them.
        self._hints: list[bytes] = []

    def __enter__(self) -> CheckpointView:
        if self._entered:
            raise InvalidInputError(
                "a checkpoint reader is entered once", where=self._cid.hex() or None
            )
        self._entered = True
        self._who = get_ident()  # before the txn is begun: __del__ may need it
        store = self._store
        borrowed = self._owner
        # begin_read refuses a closed store and checks the pid
        txn = store.begin_read() if borrowed is None else borrowed
        try:
            # After begin_read: a read-only handle may have adopted the heap tables
            # there (another process's upgrade), and the tables say so now.
            self._objects = contents(store.dbs)[0]
            head = self._head
            if head is not None:
                key, run_id, branch = head
                found = read_ref(txn, store.dbs, key, layout=store.layout)
                if found is None:  # absent, unless a row beside it is damaged (refkey100)
                    absent_head(txn, store.dbs, key, layout=store.layout)
                    raise NotFoundError("no such branch", where=f"refs/{run_id}/{branch}")
                self._cid, origin = found
            self._raw, self._header = store.load_raw(
                txn, self._cid, verify=self._verify, full=False, hints=self._hints
            )
            if head is not None:
                # The ref's check caught a damaged key; this catches a ref that
                # names another run's (or branch's) checkpoint all the same.
                raw = self._raw
                if raw.get("run_id") != run_id or (
                    origin == RECORDED and raw.get("branch") != branch
                ):
                    check_ref_target(key, origin, raw.get("run_id"), raw.get("branch"))
        except store.engine_error as exc:
            if borrowed is None:
                store.end_read(txn)
            raise store.translate(exc) from None
        except BaseException:
            if borrowed is None:
                store.end_read(txn)
            raise
        self._txn, self._fork = txn, _FORKS[0]
        self._lease.append(True)
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        txn = self._txn
        if txn is None:
            return
        self._lease.clear()  # first: nothing built from this reader reads the map again
        if _LEASES:
            _LEASES.pop(id(self._lease), None)
        if self._views:
            release_views(self._views)
        self._cache.clear()
        if self._owner is None:
            if type(self._views) is ReaderViews and not self._views.block_ended():
                self._txn = None  # the caller's views hold it: settle() hands it over
            else:  # on LMDB self._txn is forgotten as the read's entry goes
                self._store.end_read(txn, self)
        self._txn = None
        if exc is not None and isinstance(exc, self._store.engine_error):
            raise self._store.translate(exc) from None

    def __del__(self) -> None:
        # The txn still here: __exit__ stopped before the read's end (an interrupt landed
        # at its start, or in end_read before the entry's removal), or never ran (one
        # landed in __enter__ once the txn was taken). The lease ends (a cursor built from
        # this reader must not read the map once the txn ends and the map may move) and
        # the read is handed over to be ended (EnvTxns.lost_read; PostgreSQL: nothing).
        # Its zero-copy views are released first, as __exit__ releases them: one kept by a
        # caller (token_value_views) read the pages of an ended txn (review90); a slice kept
        # holds the read until its release hands it over (slices93). The txn is forgotten:
        # an __exit__ run after this (a cycle's finalizers, any order, any thread) returns,
        # leaving the read to its owner, who may have ended it already.
        txn = self._txn
        if txn is not None and self._owner is None:
            self._lease.clear()
            if _LEASES:
                _LEASES.pop(id(self._lease), None)
            if self._views:
                release_views(self._views)
            self._cache.clear()
            self._txn = None
            if type(self._views) is not ReaderViews or self._views.block_ended():
                self._store.lost_read(txn, self._who)

    def _fields(self) -> dict[str, Any]:
        """The manifest map with every field shape-checked (checked once, on first use)."""
        if not self._rest_checked:
            check_manifest_rest(self._cid, self._raw)
            self._rest_checked = True
        return self._raw

    @property
    def _manifest(self) -> Manifest:
        # Built on first use: a replay that only wants the state never pays
        # for the hex fields (the map was shape-checked when it was read).
        if self._built is None:
            fields = self._fields()  # first: a reader never entered says so here
            created = created_at_of(self._header, self._cid if self._verify else None)
            self._built = manifest_from_raw(self._cid, fields, created)
        return self._built

    @property
    def manifest(self) -> Manifest:
        """The checkpoint's manifest."""
        return self._manifest

    @property
    def id(self) -> str:
        """The checkpoint id (of ``store.latest``: known once the block is entered)."""
        if not self._cid:
            raise InvalidInputError(
                "the head is read when the block is entered; its id is not known yet",
                where=None if self._head is None else f"refs/{self._head[1]}/{self._head[2]}",
                expected="with store.latest(run) as cp: cp.id, or store.ref(run, branch)",
                got="use outside the with block",
            )
        if self._id is None:
            self._id = self._cid.hex()
        return self._id

    @property
    def verified(self) -> bool:
        """True unless opened with ``verify=False``: every read is hash-checked."""
        return self._verify

    @property
    def lease(self) -> list[bool]:
        """Non-empty exactly while this reader's txn is open (checked before zero-copy reads).

        A lease handed out is emptied in a fork() child (backend.LEASES)."""
        lease = self._lease
        if lease:
            _LEASES[id(lease)] = lease  # backend.LEASES (audit45)
        return lease

    def closed_error(self) -> InvalidInputError | ForkError:
        """The error for any use of this reader, or of an object built from it, after its block.

        ForkError in a fork() child of the process that entered it (its lease is empty there).
        """
        if self._txn is not None and self._fork != _FORKS[0]:
            return forked_view("checkpoint view", self._cid.hex() or None)
        return InvalidInputError(
            "the checkpoint reader is closed",
            where=self._cid.hex() or None,
            expected="use inside with store.read(checkpoint_id) as cp: ...",
            got="use after the with block ended",
        )

    def _not_live(self) -> InvalidInputError | ForkError:
        """Why this view cannot read (its txn is None, or it was entered before a fork():
        the txn and its reader slot are the parent's, _FORKS). Inline checks call it."""
        return self.closed_error()

    def _object(self, key: bytes, where: str) -> memoryview:
        txn = self._txn
        if txn is None or self._fork != _FORKS[0]:
            raise self._not_live()
        if self._checked_parts is not None:
            self._checked.update(self._checked_parts.values())
            self._checked_parts = None
        vet = self._verify and key not in self._checked
        try:  # one the manifest names: missing is damage (cli99), not NotFoundError
            view = named_object(txn, self._objects, key, verify=vet, where=f"{where} of {self.id}")
        except self._store.engine_error as exc:  # the store closed under this view: it says so
            raise self._store.translate(exc) from None
        if vet:
            self._checked.add(bytes(key))
        if type(view) is memoryview:  # a copy (a read without LMDB's lock file) has none
            self._views.append(view)
        return view

    def verify_objects(self, *, derive_tokens: bool = True) -> tuple[Problem, ...]:
        """Re-hash everything this checkpoint reaches, in this reader's txn; () when intact.

        What :meth:`Store.verify_checkpoint` checks. Objects this reader has
        already hash-checked are not hashed again. ``derive_tokens=False``
        skips re-deriving each token's value digest (one digest per token;
        the values and offsets objects are still re-hashed whole).
        """
        txn = self._txn
        if txn is None or self._fork != _FORKS[0]:
            raise self._not_live()
        if self._checked_parts is not None:
            self._checked.update(self._checked_parts.values())
            self._checked_parts = None
        try:
            return tuple(
                check_checkpoint_objects(
                    txn,
                    self._store.dbs,
                    self._cid,
                    checked=self._checked,
                    derive_tokens=derive_tokens,
                )
            )
        except self._store.engine_error as exc:  # closed under this view (_object, audit41)
            raise self._store.translate(exc) from None

    def _decoded(self, name: str, *, fresh: bool = False) -> list[Any]:
        """The log ``name`` decoded; ``fresh`` for a caller that hands out its nested
        values (never from the cache: a caller mutating one would change the next read)."""
        if fresh or name not in self._cache:
            key = self._fields()[name]
            value: list[Any] = []
            if key is not None:
                try:
                    value = decode_trusted(self._object(key, name))
                except CanonicalEncodingError as exc:
                    raise IntegrityError(
                        "log object is not canonical", where=f"{name} of {self.id}", got=str(exc)
                    ) from None
            if fresh:
                return value
            self._cache[name] = value
        result: list[Any] = self._cache[name]
        return result

    # -- tokens --------------------------------------------------------------

    def tokens(self) -> memoryview:
        """Packed TOKEN records (32 bytes each): a view of an owned copy.

        Copied once per reader (about 3 ms per million tokens, 32 MB), so the view and
        anything sliced or cast from it stay valid after the block ends.
        """
        if "tokens_copy" not in self._cache:
            self._cache["tokens_copy"] = memoryview(bytes(self.token_records(leased=True)))
        view: memoryview = self._cache["tokens_copy"]
        return view

    def token_records(self, *, leased: bool = False) -> memoryview:
        """The packed TOKEN records (32 bytes each), zero-copy from LMDB, read-only: released
        at the block's end, what is made from it kept valid as :meth:`token_value_views`
        says. ``leased=True``: the map's own view, not kept, for a caller that checks
        :attr:`lease` before each read and keeps no slice past the block (the cursor)."""
        if self._fork != _FORKS[0]:  # the cached view is of the parent's txn (audit45)
            raise self._not_live()
        if "tokens" not in self._cache:
            log = self._fields()["tokens"]
            self._cache["tokens"] = (
                memoryview(b"") if log is None else self._object(log["records"], "token records")
            )
        view: memoryview = self._cache["tokens"]
        if leased:
            return view
        if "tokens_kept" not in self._cache:
            self._cache["tokens_kept"] = self._hand(view)
        return self._cache["tokens_kept"]  # type: ignore[no-any-return]

    def _hand(self, view: memoryview) -> memoryview:
        # A borrowed txn ends when its owner ends it: its views are the owner's.
        if self._txn is None or self._owner is not None:
            return view
        if type(self._views) is not ReaderViews:
            self._views = ReaderViews(self._views)
        return self._views.hand(self._store, self._txn, self._who, view)

    def token_count(self) -> int:
        """Number of recorded tokens."""
        return self._manifest.token_count

    def token_values(self) -> tuple[memoryview, memoryview]:
        """(concatenated canonical value encodings, uint64 LE offsets): views of owned copies.

        Copied once per reader, like :meth:`tokens`.
        """
        if "values_copy" not in self._cache:
            values, offsets = self.token_value_views(leased=True)
            self._cache["values_copy"] = (memoryview(bytes(values)), memoryview(bytes(offsets)))
        pair: tuple[memoryview, memoryview] = self._cache["values_copy"]
        return pair

    def token_value_views(self, *, leased: bool = False) -> tuple[memoryview, memoryview]:
        """(values, uint64 LE offsets), zero-copy from LMDB, read-only: released at the
        block's end. A slice, ``memoryview()``, cast or export (``numpy.frombuffer``,
        ``pickle.PickleBuffer``) of one still referenced then keeps reading the recorded
        bytes: the read stays open until the last is released, on any thread. Meanwhile
        the map cannot change size in this process (ReadHeldDuringResizeError) and a close
        leaves the environment open: copy (``bytes(view[a:b])``, :meth:`token_values`)
        what must outlive the block (docs/store.md, "Zero-copy views", fork() children).
        ``leased=True``: as :meth:`token_records`'s."""
        if self._fork != _FORKS[0]:  # the cached views are of the parent's txn (audit45)
            raise self._not_live()
        if "values" not in self._cache:
            log = self._fields()["tokens"]
            if log is None:
                self._cache["values"] = (memoryview(b""), memoryview(bytes(8)))
            else:
                values = self._object(log["values"], "token values")
                offsets = self._object(log["offsets"], "token offsets")
                if len(offsets) != 8 * (log["count"] + 1):
                    raise IntegrityError(
                        "token offsets do not match the token count",
                        where=f"tokens of {self.id}",
                        expected=8 * (log["count"] + 1),
                        got=len(offsets),
                    )
                self._cache["values"] = (values, offsets)
        pair: tuple[memoryview, memoryview] = self._cache["values"]
        if leased:
            return pair
        if "values_kept" not in self._cache:
            self._cache["values_kept"] = (self._hand(pair[0]), self._hand(pair[1]))
        return self._cache["values_kept"]  # type: ignore[no-any-return]

    def token(self, i: int) -> tuple[int, str, str, Any]:
        """(seq, kind name, provenance, value) of token ``i``, for reports."""
        count = self.token_count()
        if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < count:
            raise InvalidInputError("token index out of range", expected=f"0 <= i < {count}", got=i)
        records = self.token_records(leased=True)
        seq, code, prov = _TOKEN_HEAD.unpack_from(records, 32 * i)
        values, offsets = self.token_value_views(leased=True)
        start = _OFFSET.unpack_from(offsets, 8 * i)[0]
        end = _OFFSET.unpack_from(offsets, 8 * i + 8)[0]
        if not start <= end <= len(values):
            raise IntegrityError(
                "token value offsets out of range",
                where=f"token {i} of {self.id}",
                got=(start, end),
            )
        enc = values[start:end]
        value = decode_trusted(enc)
        if self._verify and digest(enc) != bytes(records[32 * i + 16 : 32 * i + 32]):
            raise IntegrityError(
                "token value does not match its record", where=f"token {i} of {self.id}"
            )
        kinds = self._fields()["tokens"]["kinds"]
        name = kind_name(code) or kinds.get(code) or f"0x{code:08x}"
        return seq, name, provenance_name(prov), value

    # -- observations --------------------------------------------------------

    def observations(self) -> list[tuple[int, str, str, float | None]]:
        """(step, source, payload digest hex, pinned_at) in recorded order."""
        return [(o[0], o[1], bytes(o[2]).hex(), o[3]) for o in self._decoded("observations")]

    def payload(self, step: int, source: str, *, occurrence: int = 0) -> bytes:
        """The pinned payload of the ``occurrence``-th read of ``source`` at ``step``.

        Raises RecordingGapError when there is no such observation or it was not
        pinned: a replay must never re-fetch it.
        """
        seen = 0
        for o in self._decoded("observations"):
            if o[0] == step and o[1] == source:
                if seen == occurrence:
                    if o[3] is None:
                        raise RecordingGapError(
                            "observation was re-fetched, not pinned (cannot be replayed)",
                            where=f"step {step} source {source!r} of {self.id}",
                        )
                    return bytes(self._object(o[2], f"payload of step {step} source {source!r}"))
                seen += 1
        raise RecordingGapError(
            "no recorded observation",
            where=f"step {step} source {source!r} of {self.id}",
            expected=f"occurrence {occurrence}",
            got=f"{seen} recorded",
        )

    # -- call graph, effects, harness, transcript -----------------------------

    def call_graph(self) -> list[dict[str, Any]]:
        """Decision nodes in order; each has ``"step"`` and ``"node"``."""
        return [dict(n) for n in self._decoded("call_graph", fresh=True)]

    def effects(self) -> list[tuple[int, str, str]]:
        """The side-effect ledger: (seq, target, payload digest hex)."""
        return [(e[0], e[1], bytes(e[2]).hex()) for e in self._decoded("effects")]

    def effect_payload(self, seq: int) -> bytes:
        """The payload of ledger entry ``seq``."""
        for e in self._decoded("effects"):
            if e[0] == seq:
                return bytes(self._object(e[2], f"effect {seq} payload"))
        raise NotFoundError("no such ledger entry", where=self.id, got=seq)

    def harness_accesses(self) -> list[dict[str, Any]]:
        """Harness accesses in order: ``{"resource": str, "detail": dict}``."""
        return [dict(h) for h in self._decoded("harness", fresh=True)]

    def transcript(self) -> bytes | None:
        """The transcript bytes, or None when none was recorded."""
        key = self._fields()["transcript"]
        return None if key is None else bytes(self._object(key, "transcript"))

    # -- state ---------------------------------------------------------------

    def _blob(self, name: str, whole: bytes) -> bytes:
        chunked = self._raw["state"].get("chunked") or {}
        if name in chunked:
            txn = self._txn
            if txn is None or self._fork != _FORKS[0]:
                raise self._not_live()
            try:
                return load_chunked(
                    txn,
                    self._objects,
                    chunked[name],
                    whole,
                    verify=self._verify,
                    where=f"state[{name!r}] of {self.id}",
                )
            except self._store.engine_error as exc:  # closed under this view (_object, audit41)
                raise self._store.translate(exc) from None
        return bytes(self._object(whole, f"state[{name!r}]"))

    def state(self) -> bytes | dict[str, Any]:
        """The whole state: bytes, or part name -> value."""
        st = self._raw["state"]
        if st["kind"] == "bytes":
            return self._blob("bytes", st["digest"])
        parts: dict[str, bytes] = st["parts"]
        txn = self._txn
        if txn is not None and self._fork != _FORKS[0]:
            raise self._not_live()
        if self._verify and parts and txn is not None and not st.get("chunked"):
            # The fast path of a whole-state read (fast_read.py): None leaves it
            # for the part-by-part path below, which raises naming a part that is
            # missing, wrong or not one canonical value (and serves verify=False).
            hints = self._hints[0] if self._hints else b""
            try:
                out = read_parts(txn, self._objects, parts, hints)
            except self._store.engine_error as exc:  # closed under this view (_object)
                raise self._store.translate(exc) from None
            if out is not None:
                if not hints:
                    # Hash-checked in this txn where _object reads them (the index).
                    # Bytes hashed at a hint are not: the index may name another
                    # entry, which a later state_part or verify_objects must hash.
                    self._checked_parts = parts
                return out
        return {name: self.state_part(name) for name in st["parts"]}

    def state_part(self, name: str) -> Any:
        """The value of one state part."""
        st = self._raw["state"]
        parts = st["parts"] or {}
        if st["kind"] != "parts" or name not in parts:
            raise NotFoundError(
                "no such state part"
                + ("" if st["kind"] == "parts" else ": the state is bytes, not parts (state())"),
                where=self.id,
                expected=sorted(parts) if st["kind"] == "parts" else "a parts state",
                got=name,
            )
        try:
            return decode_trusted(self._blob(name, parts[name]))
        except CanonicalEncodingError as exc:
            raise IntegrityError(
                "state part is not canonical", where=f"state[{name!r}] of {self.id}", got=str(exc)
            ) from None
