"""The recorder: what a runtime calls step by step while a run executes.

Everything a recorder is given is held in memory and written, with the
manifest and the ref move, in the one txn of the next :meth:`Recorder.checkpoint`;
nothing partial ever reaches the store. Logs are cumulative: a checkpoint's
logs cover the run from its first step (or from the run's start, through the
fork parent), so a replay of any checkpoint has the whole history.

A recorder is not thread-safe: use one per thread (or lock around it). Its
cold ends, loading the checkpoint it extends and its close, are its base
:class:`cpstore.store.recorder_ends.RecorderEnds`.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import msgspec
from xxhash import xxh3_128_digest as _xxh3_128

from cpstore.errors import (
    CanonicalEncodingError,
    ConflictError,
    InvalidInputError,
    NotFoundError,
    RecordFormatError,
    StoreError,
)
from cpstore.native.append_log import AppendLog
from cpstore.native.args import check_text, non_empty_text
from cpstore.native.binding import digest
from cpstore.native.canonical import encode_value
from cpstore.native.columns import fast_encoding
from cpstore.native.fast_canonical import encode_fast
from cpstore.native.records import PROVENANCE_CODES, STEP_LIMIT, Digest, KindTable, step_value
from cpstore.run.nodes import decision_node
from cpstore.store.append_state import AppendParts
from cpstore.store.at_exit import track_recorder
from cpstore.store.backend import Backend
from cpstore.store.batch_fates import not_stored
from cpstore.store.branches import head_of, head_unmoved
from cpstore.store.bulk import BulkAppends, checked_pin
from cpstore.store.chunk_tree import TREE_THRESHOLD, build_tree, stash_tree
from cpstore.store.commit import objects_to_check
from cpstore.store.lmdb_open import PROCESS
from cpstore.store.manifest import (
    digest_map_and_order,
    encode_recorded_manifest,
    encode_state,
    referenced_digests,
)
from cpstore.store.model import (
    MAX_OBJECT_SIZE,
    CheckpointWrite,
    as_payload,
    check_metadata,
    check_tags,
    checked_metadata,
    commit_stored,
    expected_records,
    extension_records,
    pack_checkpoint_value,
    parse_id,
)
from cpstore.store.recorder_ends import RecorderEnds

__all__ = ["Recorder"]

# Same bytes as cpstore.native.records.pack_token (a golden test pins it); inlined
# here because token() is on the runtime's hot path.
_TOKEN = struct.Struct("<QIB3x16s")
_PROVENANCE = {name: int(code) for name, code in PROVENANCE_CODES.items()}
_INT64, _UINT64_END = 2**63, 2**64
_msgpack = msgspec.msgpack.Encoder().encode
_LOG_NAMES = ("observations", "call_graph", "effects", "harness")
#: A manifest's id: python-xxhash's XXH3-128 (digest()'s twin) typed as a Digest once, here,
#: not by a ``Digest()`` call per checkpoint (perf99: a NewType call, ~0.7k instructions).
_cid_of = cast(Callable[[bytes], Digest], _xxh3_128)
#: Built-in types no AppendLog is (skips the ABC's isinstance for a plain part value).
_NOT_APPEND_LOG = frozenset((str, bytes, int, float, bool, type(None), list, dict, tuple))


def _step(value: object, where: str) -> int:
    """``value``'s int when it is a step (an int, not a bool, in [0, 2**63), judged by its
    value: an int subclass's own comparisons may lie); else InvalidInputError saying where
    (the run and branch), before anything is written."""
    step = step_value(value)
    if step is not None:
        return step
    raise InvalidInputError(
        "step must be an int in [0, 2**63)",
        where=where,
        expected="an int (not a bool) in [0, 2**63)",
        got=value,
    )


class Recorder(BulkAppends, RecorderEnds):
    """Records one run on one branch; create with :meth:`Store.recorder`."""

    def __init__(self, store: Backend, run_id: str, branch: str, parent: str | None) -> None:
        self._store = store
        # A fork() child inherits this object but not its effects: only the
        # process that made it may report them dropped (docs/durability.md). Told by
        # lmdb_open.PROCESS, not the pid, which a descendant may get again (left93).
        self._process = PROCESS[0]
        self._run_id = run_id
        self._branch = branch
        head_hex = head_of(store, run_id, branch)
        head = None if head_hex is None else bytes.fromhex(head_hex)
        self._expected = head
        # The head's CheckpointWrite.dropped when this recorder queued it (batched mode):
        # filled when the batch holding it was dropped, not stored (hunt100).
        self._dropped: list[BaseException] = []
        self._parent: bytes | None = None
        # The step of the checkpoint this recorder extends: steps never go backwards.
        self._last_step: int | None = None
        self._tokens = bytearray()
        self._values = bytearray()
        self._offsets = array("Q", [0])
        self._kinds = KindTable()
        self._kind_cache: dict[str, int] = {}
        self._observations: list[list[Any]] = []
        self._graph: list[dict[str, Any]] = []
        self._effects: list[list[Any]] = []
        self._harness: list[dict[str, Any]] = []
        self._transcript: bytes | None = None
        self._tags: dict[str, None] = {}
        self._sealed = False
        self._sealed_count = 0  # effects covered by this recorder's last sealing checkpoint
        self._closed = False
        self._pending: dict[bytes, bytes] = {}
        # Objects a stash may skip: only what the head this recorder extends reaches (the
        # commit txn still reads each one: commit.objects_to_check). Anything older (an
        # earlier checkpoint's state part) is stashed again, put write-once (a no-op).
        self._confirmed: set[bytes] = set()
        # Payload keys of the logs (cumulative: once committed, the head's logs reach each).
        self._logged: set[bytes] = set()
        self._unlogged: list[bytes] = []
        self._chunks: list[bytes] = []
        self._logs: dict[str, bytes | None] = {}
        self._dirty = {"tokens", "observations", "call_graph", "effects", "harness"}
        self._inherited: set[bytes] = set()
        # name -> (immutable value, part digest, chunk index digest): unchanged
        # bytes/str parts are not re-encoded or re-hashed each checkpoint.
        self._parts: dict[str, tuple[object, bytes, bytes | None]] = {}
        #: The state parts' digests in the manifest's order (the commit's hint keys).
        self._order: tuple[bytes, ...] = ()
        self._appends = AppendParts()  # AppendLog parts: trees continued (append_state.py)
        self._names: tuple[bytes, bytes] | None = None
        self._token_refs: dict[str, bytes] | None = None
        # The tags list's canonical bytes and its tag count (tags only grow: encode again).
        self._tags_enc: tuple[int, bytes] = (-1, b"")
        start: bytes | None = None if parent is None else parse_id(parent, "parent")
        if head is not None:
            # An existing branch only ever grows from its head: recording from an
            # older checkpoint would move the head sideways and drop what came
            # after it from the branch's history (and from retention's marks).
            if start is not None and start != head:
                raise ConflictError(
                    "the branch has moved past this parent; fork a new branch from it",
                    where=f"run {run_id} branch {branch}",
                    expected=start.hex(),
                    got=head.hex(),
                )
            start = head
        if start is not None:
            try:
                self._load_parent(start)
            except NotFoundError:  # moved away and swept since head_of: ConflictError
                if head_hex is not None:
                    head_unmoved(store, run_id, branch, head_hex)
                raise
        self._sealed_count = len(self._effects)
        track_recorder(self)

    # -- properties ----------------------------------------------------------

    @property
    def run_id(self) -> str:
        """The run being recorded."""
        return self._run_id

    @property
    def branch(self) -> str:
        """The branch whose ref each checkpoint moves."""
        return self._branch

    @property
    def head(self) -> str | None:
        """The last checkpoint this recorder wrote (or forked from)."""
        return None if self._parent is None else self._parent.hex()

    @property
    def token_count(self) -> int:
        """Tokens recorded so far (the next token's seq)."""
        return len(self._tokens) // _TOKEN.size

    @property
    def ledger_sealed(self) -> bool:
        """True when the last checkpoint sealed the ledger and no effect came after it."""
        return self._sealed

    # -- logs ----------------------------------------------------------------

    def _stash(self, data: bytes) -> bytes:
        key = digest(data)
        if key not in self._confirmed and key not in self._logged:
            self._pending[key] = data
        return key

    def _stash_payload(self, data: bytes) -> bytes:
        key = self._stash(data)
        self._unlogged.append(key)
        return key

    def observe(self, step: int, source: str, payload: bytes, *, pinned_at: float | None) -> None:
        """Record an external read; ``pinned_at`` None means re-fetched (unpinned)."""
        step = _step(step, f"run {self._run_id} branch {self._branch} observation")
        non_empty_text(source, "source")
        data = as_payload(payload, "observation payload")
        if pinned_at is not None:
            pinned_at = checked_pin(pinned_at)
        self._observations.append([step, source, self._stash_payload(data), pinned_at])
        self._dirty.add("observations")

    def _kind(self, kind: str) -> int:
        try:
            return self._kinds.code(kind)
        except RecordFormatError as exc:
            raise InvalidInputError(
                exc.what, where="kind", expected=exc.expected, got=exc.got
            ) from None

    def token(self, kind: str, value: Any, *, provenance: str = "recorded") -> int:
        """Record one nondeterminism token and return its seq."""
        # The runtime's hot path: plain-dict lookups, the scalar shortcut of the
        # canonical encoding, python-xxhash for the small digest (same bytes).
        try:
            prov = _PROVENANCE[provenance]
        except (KeyError, TypeError):
            raise InvalidInputError(
                "unknown provenance", expected=list(PROVENANCE_CODES), got=provenance
            ) from None
        kind_of = type(value)
        if (kind_of is int and -_INT64 <= value < _UINT64_END) or kind_of is str:
            try:
                enc = _msgpack(value)  # shortest form: the canonical one (fast_encoding)
            except UnicodeEncodeError:
                enc = fast_encoding(value)  # a lone surrogate: raises naming it
        else:
            enc = fast_encoding(value)
        try:  # after the value's check: a refused token leaves no kind in the log
            code = self._kind_cache[kind]
        except (KeyError, TypeError):
            code = self._kind(kind)  # raises for a kind that is not a usable name
            self._kind_cache[kind] = code
        tokens = self._tokens
        seq = len(tokens) >> 5
        tokens += _TOKEN.pack(seq, code, prov, _xxh3_128(enc))
        values = self._values
        values += enc
        self._offsets.append(len(values))
        self._dirty.add("tokens")
        return seq

    def decision(self, step: int, node: str | Mapping[str, Any], /, **fields: Any) -> None:
        """Record a call-graph decision: ``decision(step, "select_tool", tool="search")`` or
        ``decision(step, {"node": "select_tool", "tool": "search"})`` (the same entry;
        :func:`cpstore.run.nodes.decision_node`, shared with the replay session)."""
        self._graph.append(decision_node(step, node, fields))
        self._dirty.add("call_graph")

    def effect(self, target: str, payload: bytes) -> int:
        """Append a side effect to the ledger and return its seq.

        A sealed ledger never changes: after a sealing checkpoint the effect
        goes to a new ledger that starts with the sealed entries, exactly as
        a recorder forked from that checkpoint would.
        """
        non_empty_text(target, "effect target")
        data = as_payload(payload, "effect payload")
        seq = len(self._effects)
        self._effects.append([seq, target, self._stash_payload(data)])
        self._dirty.add("effects")
        self._sealed = False
        return seq

    def harness_access(self, resource: str, detail: Mapping[str, Any] | None = None) -> None:
        """Record an access the replay harness itself made (seed 004)."""
        non_empty_text(resource, "resource")
        self._harness.append({"resource": resource, "detail": check_metadata(detail, "detail")})
        self._dirty.add("harness")

    def transcript(self, data: bytes) -> None:
        """Replace the transcript recorded so far."""
        self._transcript = self._stash(as_payload(data, "transcript"))

    # -- checkpoint ----------------------------------------------------------

    def _blob(
        self, data: bytes, chunked: dict[str, bytes], name: str, *, canonical: bool = True
    ) -> bytes:
        if len(data) > TREE_THRESHOLD and canonical:  # a list's tree continued (append_state.py)
            return self._appends.blob(self, name, data, chunked)
        if len(data) > TREE_THRESHOLD:  # issue 16: a chunk tree (docs/format.md)
            tree = build_tree(data, canonical=canonical)
            self._chunks.extend(stash_tree(tree, data, self._pending, self._confirmed))
            chunked[name] = tree.root
            return tree.whole
        return self._stash(data)

    def _state(self, state: bytes | Mapping[str, Any]) -> tuple[dict[str, Any], bytes]:
        """The manifest's state map and its canonical bytes."""
        chunked: dict[str, bytes] = {}
        self._order = ()
        if isinstance(state, (bytes, bytearray, memoryview)):
            whole = self._blob(as_payload(state, "state"), chunked, "bytes", canonical=False)
            st = {"kind": "bytes", "digest": whole, "parts": {}, "chunked": chunked}
            return st, encode_state(st, b"\x80")
        if type(state) is not dict and not isinstance(state, Mapping):  # dict: no ABC check
            raise InvalidInputError(
                "state must be bytes or a mapping of part names to values",
                got=type(state).__name__,
            )
        parts: dict[str, bytes] = {}
        # The cache keeps only this checkpoint's parts: a hit must name an
        # object the head reaches (see _confirmed), never an older one.
        cache = self._parts
        kept: dict[str, tuple[object, bytes, bytes | None]] = {}
        self._parts = kept
        for name, value in state.items():
            if not isinstance(name, str) or not name:
                raise InvalidInputError("state part names must be non-empty str", got=name)
            cached = cache.get(name)
            if cached is not None and cached[0] is value:  # its name was checked when cached
                parts[name] = cached[1]
                if cached[2] is not None:
                    chunked[name] = cached[2]
                kept[name] = cached
                continue
            check_text(name, "state part name")
            if type(value) not in _NOT_APPEND_LOG and isinstance(value, AppendLog):
                parts[name] = self._appends.part(self, name, value, chunked)
                continue
            try:
                enc = encode_fast(value)  # encode_value's bytes and errors
            except CanonicalEncodingError as exc:  # its path starts at "$": name the part
                raise CanonicalEncodingError(
                    exc.what,
                    where=f"state[{name!r}]" + (exc.where or "$")[1:],
                    expected=exc.expected,
                    got=exc.got,
                ) from None
            if len(enc) > MAX_OBJECT_SIZE:
                raise InvalidInputError(
                    "state part is larger than the largest object",
                    where=f"state[{name!r}]",
                    expected=f"<= {MAX_OBJECT_SIZE} bytes",
                    got=f"{len(enc)} bytes",
                )
            parts[name] = self._blob(enc, chunked, name)
            if type(value) is bytes or isinstance(value, str):  # never bytes(), which may change
                kept[name] = (value, parts[name], chunked.get(name))
        parts_bytes, order = digest_map_and_order(parts)
        if not chunked:
            self._order = order
        st = {"kind": "parts", "digest": _xxh3_128(parts_bytes), "parts": parts, "chunked": chunked}
        return st, encode_state(st, parts_bytes)

    def checkpoint(
        self,
        step: int,
        state: bytes | Mapping[str, Any],
        *,
        tags: Sequence[str] = (),
        metadata: Mapping[str, Any] | None = None,
        seal_ledger: bool = True,
        extra_meta: Callable[[bytes], Sequence[tuple[bytes, bytes | None]]] | None = None,
        meta_expected: Sequence[tuple[bytes, bytes]] = (),
    ) -> str:
        """Write a checkpoint of everything recorded so far; return its id (hex).

        In ``"sync"`` mode it is durable when this returns; in ``"batched"`` mode
        when the batch is flushed. ``seal_ledger`` seals the side-effect ledger as
        it stands: that ledger object never changes, and later :meth:`effect`
        calls build the next checkpoint's ledger on top of it.
        ``extra_meta(cid)`` returns ``meta`` records (value, or None to delete)
        committed in the same txn, keys under ``EXTENSION_META_PREFIXES``; ``meta_expected``
        records must hold those bytes in that txn (else ConflictError, nothing written; refused
        when batched). A batched call that stored its checkpoint may raise about earlier ones.
        A checkpoint not stored leaves the recorder as it was: nothing of its state is
        queued for the next one (docs/store.md, "A checkpoint that is not stored").
        """
        pending, parts, head = self._pending, self._parts, self._expected
        try:
            return self._checkpoint(
                step,
                state,
                tags=tags,
                metadata=metadata,
                seal_ledger=seal_ledger,
                extra_meta=extra_meta,
                meta_expected=meta_expected,
            )
        except BaseException:
            if self._expected is head:  # not stored (a stored one is followed, then raised)
                self._pending, self._parts = pending, parts
            raise

    def _still_dropped(self) -> bool:
        """Whether this recorder's head, in a batch commit that failed, is not stored: told
        so, or its outcome unknown (the commit lost, a failure after it, an interrupt the
        read-back could not settle: inflight102; never a requeued batch) and the branch's
        stored head is not it. Stored after all, the recorder goes on: an outcome unknown
        was passed over, and its next checkpoint, on a head that was never stored, failed
        the next batch and dropped every other recorder's checkpoint in it (review101)."""
        if any(not_stored(exc) for exc in self._dropped):
            return True
        expected = None if self._expected is None else self._expected.hex()
        if head_of(self._store, self._run_id, self._branch) != expected:
            return True
        self._dropped = []
        return False

    def _extends_dropped(self) -> ConflictError:
        """The refusal of a checkpoint extending this recorder's head, which a failed batch
        commit dropped: queued, it would fail the next batch and drop every checkpoint in
        it, other recorders' too, each later one again (hunt100)."""
        head = "" if self._expected is None else self._expected.hex()
        # Where as the compare-and-set's it replaces ("at refs/RUN/BRANCH", which the
        # chaos checker reads); the cause by its class only (its text names another ref).
        return ConflictError(
            f"this recorder's last checkpoint is not stored: the batch commit holding it "
            f"failed ({type(self._dropped[0]).__name__}), so a checkpoint extending it "
            "would fail every later batch; open a new recorder on the branch (it "
            "continues from the stored head)",
            where=f"refs/{self._run_id}/{self._branch}",
            got=head,
        )

    def _checkpoint(
        self,
        step: int,
        state: bytes | Mapping[str, Any],
        *,
        tags: Sequence[str],
        metadata: Mapping[str, Any] | None,
        seal_ledger: bool,
        extra_meta: Callable[[bytes], Sequence[tuple[bytes, bytes | None]]] | None,
        meta_expected: Sequence[tuple[bytes, bytes]],
    ) -> str:
        """:meth:`checkpoint`, its state's objects staged apart from the queue (audit34: a
        failed commit left them queued, and they rode along with every later checkpoint)."""
        if type(step) is not int or not 0 <= step < STEP_LIMIT:  # an int subclass: its value
            step = _step(step, f"run {self._run_id} branch {self._branch}")
        if self._closed:
            raise StoreError("the recorder is closed", where=f"run {self._run_id}")
        if self._dropped and self._still_dropped():
            raise self._extends_dropped()
        if self._last_step is not None and step < self._last_step:
            raise InvalidInputError(
                "steps never go backwards: a checkpoint's step is at least its parent's",
                where=f"run {self._run_id} branch {self._branch}",
                expected=f">= {self._last_step}",
                got=step,
            )
        if type(tags) is not tuple or tags:
            self._tags.update(dict.fromkeys(check_tags(tags)))
        _, meta_bytes = checked_metadata(metadata, "metadata")
        self._chunks = []
        pending = self._pending
        staged: dict[bytes, bytes] = {}
        self._pending = staged
        state_map, state_bytes = self._state(state)
        self._pending = pending
        tokens = self._token_log()
        logs = self._log
        if self._names is None:
            self._names = (encode_value(self._run_id), encode_value(self._branch))
        if self._tags_enc[0] != len(self._tags):
            self._tags_enc = (len(self._tags), encode_value(list(self._tags)))
        cached_tokens = self._logs.get("tokens")
        fields: dict[str, Any] = {"state": state_map, "tokens": tokens}
        dirty, stored_log = self._dirty, self._logs.get  # _log's own answer when clean
        for name in _LOG_NAMES:
            fields[name] = logs(name) if name in dirty else stored_log(name)
        fields["transcript"] = self._transcript
        manifest = encode_recorded_manifest(
            fields,
            run_id=self._names[0],
            branch=self._names[1],
            step=step,
            parent=self._parent,
            state=state_bytes,
            tokens=b"\xc0" if cached_tokens is None else cached_tokens,
            ledger_sealed=bool(seal_ledger),
            tags=self._tags_enc[1],
            metadata=meta_bytes,
        )
        cid = _cid_of(manifest)  # digest()'s bytes (python-xxhash: its twin)
        named = referenced_digests(fields)
        objects = {**pending, **staged}
        must_exist = objects_to_check(named, objects, inherited=self._inherited)
        # Positional, in the dataclass's field order: a class called with keywords gets
        # them as a dict its __init__ then parses (perf99: ~9.2k instructions, ~5.0k so).
        op = CheckpointWrite(
            cid,  # cid
            pack_checkpoint_value(self._store.now(), manifest, cid),  # value
            self._run_id,  # run_id
            self._branch,  # branch
            self._expected,  # expected_ref
            self._parent,  # parent
            objects,  # objects
            must_exist,  # must_exist
            fields["effects"] if seal_ledger else None,  # sealed_ledger
        )
        if self._order:  # the parts' digests in the manifest's order (_state: none chunked)
            op.hint_keys = self._order
        if extra_meta is not None:
            op.extra_meta = extension_records(extra_meta(cid))
        if meta_expected:
            op.meta_expected = expected_records(meta_expected, self._store.durability)
        self._chunks, chunks = [], self._chunks
        failed = commit_stored(self._store.commit, op)  # raised once the recorder follows
        named.update(chunks)
        self._confirmed = named
        self._logged.update(self._unlogged)
        self._unlogged.clear()
        self._pending.clear()
        self._inherited.clear()
        self._expected = cid
        self._parent = cid
        self._last_step = step
        self._dropped = op.dropped  # a batch that drops it says so here (hunt100)
        if seal_ledger:
            self._sealed = True
            self._sealed_count = len(self._effects)
        if failed is not None:
            raise failed
        return cid.hex()
