"""Whole-store and per-checkpoint checks: ``verify`` and ``check_checkpoint_objects``.

``verify`` is composed of small per-entry checks and reports every problem as
data (retention, which shares the reference walk, is :mod:`cpstore.store.retention`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from cpstore.errors import CanonicalEncodingError, CpstoreError, IntegrityError
from cpstore.native.binding import digest, digest_batch
from cpstore.native.canonical import decode_value
from cpstore.native.records import DIGEST_SIZE
from cpstore.store.audit_chain import check_audit_chain
from cpstore.store.backend import Backend, Txn
from cpstore.store.chunk_tree import load_tree, tree_objects
from cpstore.store.codec import FRAME_KEY_SIZE, stored_key
from cpstore.store.content import Content, objects_of, records_of
from cpstore.store.heap_check import heap_problems
from cpstore.store.keyed_audit import check_macs
from cpstore.store.lg_head import head_problem
from cpstore.store.lg_index import check_index
from cpstore.store.manifest import Manifest, decode_manifest, manifest_references
from cpstore.store.model import Problem, VerifyReport, split_ref_key, unpack_checkpoint_value
from cpstore.store.objects import load_chunked
from cpstore.store.ref_table import check_refs
from cpstore.store.refs import pinned_objects
from cpstore.store.retained import retained_heads, unbacked_holds

__all__ = ["check_checkpoint_objects", "child_kind", "children", "verify"]


def _peek(txn: Txn[memoryview], objects: Content, key: bytes) -> Any:
    """The stored bytes of ``key``, or None when missing or its location is damaged
    (heap_problems reports the location; callers report what is missing)."""
    try:
        return objects.get(txn, key)
    except IntegrityError:
        return None


def _decode_list(txn: Txn[memoryview], objects: Content, key: bytes) -> list[Any]:
    raw = _peek(txn, objects, key)
    if raw is None:
        return []
    value = decode_value(raw)
    return value if isinstance(value, list) else []


def child_kind(field: str) -> str | None:
    """How an object in role ``field`` names others (None: it names none)."""
    if field.startswith("state.chunked"):
        return "chunks"
    if field in ("observations", "effects"):
        return "log"
    return None


def children(
    txn: Txn[memoryview], objects: Content, field: str, key: bytes, walked: set[bytes] | None = None
) -> Iterable[bytes]:
    """Objects an object names: nodes and chunks of a chunk tree, payloads of a log.

    ``walked`` (chunk trees): complete nodes already expanded by an earlier
    call, whose descendants the caller holds; they are named, not walked again.
    """
    if field.startswith("state.chunked"):
        yield from tree_objects(txn, objects, key, walked)  # nodes and frames (issue 16)
    elif field in ("observations", "effects"):
        slot = 2
        for entry in _decode_list(txn, objects, key):
            yield entry[slot]


# -- verify ---------------------------------------------------------------


def _check_tokens(
    txn: Txn[memoryview],
    objects: Content,
    where: str,
    log: Mapping[str, Any],
    problems: list[Problem],
) -> None:
    records = _peek(txn, objects, log["records"])
    values = _peek(txn, objects, log["values"])
    offsets = _peek(txn, objects, log["offsets"])
    if records is None or values is None or offsets is None:
        return  # reported as unresolved references
    count = log["count"]
    if len(records) != 32 * count or len(offsets) != 8 * (count + 1):
        problems.append(
            Problem(
                "token log sizes disagree with its count",
                where,
                expected=count,
                got=(len(records), len(offsets)),
            )
        )
        return
    try:
        digests = digest_batch(values, offsets, byteorder="little")  # stored little-endian
    except CpstoreError as exc:
        problems.append(Problem("token value offsets are malformed", where, got=exc.what))
        return
    rec = memoryview(records).cast("Q")
    dig = memoryview(digests).cast("Q")
    if rec[2::4].tolist() != dig[0::2].tolist() or rec[3::4].tolist() != dig[1::2].tolist():
        problems.append(Problem("token values do not match their records", where))


def _check_entry(
    cid: bytes, value: memoryview, where: str, problems: list[Problem]
) -> Manifest | None:
    """The manifest of one ``checkpoints`` entry, or None after reporting why not."""
    try:
        created, data = unpack_checkpoint_value(value)
    except CpstoreError as exc:
        problems.append(Problem(exc.what, exc.where or where, exc.expected, exc.got))
        return None
    try:
        unpack_checkpoint_value(value, cid)
    except CpstoreError as exc:  # created_at damaged: the manifest may still be intact
        problems.append(Problem(exc.what, exc.where or where, exc.expected, exc.got))
    got = digest(data)
    if got != cid:
        problems.append(
            Problem(
                "manifest bytes do not match the checkpoint id",
                where,
                expected=cid.hex(),
                got=got.hex(),
            )
        )
        return None
    try:
        return decode_manifest(cid, data, created)
    except CpstoreError as exc:
        problems.append(Problem(exc.what, exc.where or where, exc.expected, exc.got))
        return None


def _check_parent(
    txn: Txn[memoryview], dbs: Mapping[str, Any], m: Manifest, where: str, problems: list[Problem]
) -> None:
    if m.parent is not None:
        parent = bytes.fromhex(m.parent)
        if (
            not records_of(dbs).exists(txn, parent)
            and txn.get(parent, db=dbs["tombstones"]) is None
        ):
            problems.append(
                Problem("parent checkpoint does not resolve", f"{where}.parent", expected=m.parent)
            )


def _check_head(
    txn: Txn[memoryview],
    dbs: Mapping[str, Any],
    cid: bytes,
    m: Manifest,
    *,
    where: str,
    problems: list[Problem],
) -> None:
    """A LangGraph checkpoint's head framing (layout 2: cpstore/store/lg_head.py)."""
    problem = head_problem(txn, dbs["meta"], cid, run_id=m.run_id, metadata=m.metadata, where=where)
    if problem is not None:
        problems.append(problem)


def _unresolved(where: str, key: bytes, position: int | None = None) -> Problem:
    """A manifest, log or chunk index names an object that is not stored."""
    hexkey = bytes(key).hex()
    return Problem(
        "reference does not resolve",
        f"{where} (objects/{hexkey})",
        expected=hexkey,
        got="missing",
        position=position,
    )


def _check_checkpoint(
    txn: Txn[memoryview],
    dbs: Mapping[str, Any],
    cid: bytes,
    value: memoryview,
    problems: list[Problem],
    *,
    parents: dict[bytes, str | None],
) -> None:
    where = f"checkpoints/{cid.hex()}"
    objects = objects_of(dbs)
    m = _check_entry(cid, value, where, problems)
    if m is None:
        return
    parents[bytes(cid)] = m.parent  # the LangGraph index's lineage check reads it
    _check_parent(txn, dbs, m, where, problems)
    _check_head(txn, dbs, cid, m, where=where, problems=problems)
    for field, key in manifest_references(m.raw):
        if _peek(txn, objects, key) is None:
            problems.append(_unresolved(f"{where}.{field}", key))
            continue
        try:
            for i, child in enumerate(children(txn, objects, field, key)):
                if _peek(txn, objects, child) is None:
                    problems.append(_unresolved(f"{where}.{field}[{i}]", child, i))
        except (CpstoreError, TypeError, ValueError, IndexError) as exc:
            problems.append(
                Problem("log or chunk index is malformed", f"{where}.{field}", got=str(exc))
            )
    chunked = m.raw["state"]["chunked"] or {}
    wholes = {"bytes": m.raw["state"]["digest"], **(m.raw["state"]["parts"] or {})}
    for name, index in chunked.items():
        try:
            load_chunked(
                txn, objects, index, wholes[name], verify=True, where=f"{where}.state[{name!r}]"
            )
        except CpstoreError as exc:
            problems.append(Problem(exc.what, exc.where or where, exc.expected, exc.got))
        except KeyError:
            problems.append(
                Problem("chunked entry names no part", f"{where}.state.chunked", got=name)
            )
    if m.raw["tokens"] is not None:
        _check_tokens(txn, objects, f"{where}.tokens", m.raw["tokens"], problems)


# -- one checkpoint, every byte it reaches -------------------------------------

#: Objects up to this size are re-hashed together, one ``digest_batch`` call
#: over their concatenation; larger ones in place (zero-copy), one call each.
_BATCH_MAX = 64 * 1024


class _Rehash:
    """Re-hash the objects of one read txn against their keys, reporting each bad one."""

    def __init__(
        self,
        txn: Txn[memoryview],
        objects: Content,
        where: str,
        checked: set[bytes],
        problems: list[Problem],
    ) -> None:
        self._objects = objects
        self.txn, self.objects = txn, objects
        self.where = where
        self._checked = checked
        self.problems = problems
        self._queue: list[tuple[bytes, memoryview, str, int | None]] = []

    def get(
        self, key: bytes, field: str, position: int | None = None, *, now: bool = False
    ) -> memoryview | None:
        """The object's view (queued for re-hash), or None when it is missing.

        ``now`` hashes before returning, and gives None for a bad object too:
        for objects the caller decodes (logs, chunk indexes).
        """
        key = bytes(key)
        try:
            view = self._objects.get(self.txn, key)
        except IntegrityError as exc:  # a damaged location: never someone else's bytes
            self.problems.append(
                Problem(exc.what, f"{self.where}.{field} ({exc.where})", exc.expected, exc.got)
            )
            return None
        if view is None:
            self.problems.append(
                Problem(
                    "object not in the store",
                    f"{self.where}.{field} (objects/{key.hex()})",
                    expected=key.hex(),
                    got="missing",
                    position=position,
                )
            )
            return None
        if key in self._checked:
            return view
        if now or len(view) > _BATCH_MAX:
            return view if self._check(key, digest(view), field, position) else None
        self._queue.append((key, view, field, position))
        return view

    def _check(self, key: bytes, got: bytes, field: str, position: int | None) -> bool:
        if got == key:
            self._checked.add(key)
            return True
        self.problems.append(
            Problem(
                "object bytes do not match their digest",
                f"{self.where}.{field} (objects/{key.hex()})",
                expected=key.hex(),
                got=got.hex(),
                position=position,
            )
        )
        return False

    def flush(self) -> None:
        """Re-hash everything queued, in one native call."""
        queue, self._queue = self._queue, []
        if not queue:
            return
        offsets = [0]
        for _, view, _, _ in queue:
            offsets.append(offsets[-1] + len(view))
        digests = digest_batch(b"".join(view for _, view, _, _ in queue), offsets)
        for i, (key, _, field, position) in enumerate(queue):
            self._check(key, digests[16 * i : 16 * i + 16], field, position)


def _rehash_chunked(objs: _Rehash, index: bytes, whole: bytes, field: str) -> None:
    # Chunk trees are read whole, every node and frame hash-checked (issue 16).
    try:
        load_tree(objs.txn, objs.objects, index, whole, verify=True, where=f"{objs.where}.{field}")
    except IntegrityError as exc:
        objs.problems.append(Problem(exc.what, exc.where or objs.where, exc.expected, exc.got))


def _rehash_log(objs: _Rehash, name: str, key: bytes) -> None:
    raw = objs.get(key, name, now=True)
    if raw is None or name not in ("observations", "effects"):
        return
    try:
        entries = decode_value(raw)
        payloads = [bytes(entry[2]) for entry in entries]
    except (CanonicalEncodingError, TypeError, ValueError, IndexError, KeyError) as exc:
        objs.problems.append(
            Problem("log object is malformed", f"{objs.where}.{name}", got=str(exc))
        )
        return
    for i, payload in enumerate(payloads):
        objs.get(payload, f"{name}[{i}].payload", i)


def check_checkpoint_objects(
    txn: Txn[memoryview],
    dbs: Mapping[str, Any],
    cid: bytes,
    *,
    checked: set[bytes] | None = None,
    derive_tokens: bool = True,
) -> list[Problem]:
    """Every problem with one checkpoint and the objects it reaches, all re-hashed.

    ``checked`` holds objects already hash-checked in this txn (skipped);
    objects found intact are added to it. ``derive_tokens`` also re-derives
    the token value digests from ``values``/``offsets`` and compares them
    with the records (as :func:`verify` does; one digest per token).
    """
    where = f"checkpoints/{cid.hex()}"
    problems: list[Problem] = []
    try:
        value = records_of(dbs).get(txn, cid)
    except IntegrityError as exc:
        return [Problem(exc.what, exc.where or where, exc.expected, exc.got)]
    if value is None:
        pruned = txn.get(cid, db=dbs["tombstones"]) is not None
        what = "checkpoint was pruned" if pruned else "checkpoint not in the store"
        return [Problem(what, where, expected=cid.hex(), got="missing")]
    m = _check_entry(cid, value, where, problems)
    if m is None:
        return problems
    _check_parent(txn, dbs, m, where, problems)
    _check_head(txn, dbs, cid, m, where=where, problems=problems)
    objs = _Rehash(txn, objects_of(dbs), where, set() if checked is None else checked, problems)
    state = m.raw["state"]
    chunked = state["chunked"] or {}
    wholes = {"bytes": state["digest"]} if state["kind"] == "bytes" else state["parts"] or {}
    for i, (name, whole) in enumerate(wholes.items()):
        if name in chunked:
            _rehash_chunked(objs, chunked[name], whole, f"state.chunked[{name!r}]")
        elif state["kind"] == "bytes":
            objs.get(whole, "state.digest")
        else:
            objs.get(whole, f"state.parts[{name!r}]", i)
    for name in ("observations", "call_graph", "effects", "harness"):
        if m.raw[name] is not None:
            _rehash_log(objs, name, m.raw[name])
    if m.raw["transcript"] is not None:
        objs.get(m.raw["transcript"], "transcript")
    log = m.raw["tokens"]
    if log is not None:
        before = len(problems)
        records = objs.get(log["records"], "tokens.records")
        objs.get(log["values"], "tokens.values")
        offsets = objs.get(log["offsets"], "tokens.offsets")
        objs.flush()
        if len(problems) == before and derive_tokens:
            _check_tokens(txn, objs.objects, f"{where}.tokens", log, problems)
        elif len(problems) == before:
            sizes = (len(records or b""), len(offsets or b""))
            if sizes != (32 * log["count"], 8 * (log["count"] + 1)):
                problems.append(
                    Problem(
                        "token log sizes disagree with its count",
                        f"{where}.tokens",
                        expected=log["count"],
                        got=sizes,
                    )
                )
    objs.flush()
    return problems


def _kept_count(txn: Txn[memoryview], dbs: Mapping[str, Any], walked: int) -> list[Problem]:
    """The refs table's entry count (what refs70's create check reads) against the refs
    walked in the same txn. On LMDB they are one number; on PostgreSQL the count is kept
    by triggers (pg_count.py) and drifts when they were disabled or bypassed (pgcount72)."""
    stat = txn.stat(dbs["refs"])
    kept = int(stat.get("kept", stat["entries"]))  # a count(*) handle's kept one (review73)
    if kept == walked:
        return []
    return [
        Problem(
            "the refs table's kept row count is not its rows (its count triggers were "
            "disabled or bypassed, e.g. session_replication_role = replica): the create "
            "check reads this count (docs/store.md, 'No ref is created from nothing')",
            "counts/refs",
            expected=f"{walked} refs",
            got=f"{kept} refs",
        )
    ]


#: Entries between two progress reports of :func:`verify`.
PROGRESS_EVERY = 4096

Progress = Callable[[int, int], None]


def verify(store: Backend, progress: Progress | None = None) -> VerifyReport:
    """Walk every database; see :meth:`Store.verify`."""
    dbs = store.dbs
    problems: list[Problem] = []
    counts = dict.fromkeys(("objects", "checkpoints", "refs", "ledgers", "tombstones", "audit"), 0)
    parents: dict[bytes, str | None] = {}  # checkpoint -> its parent, every decoded manifest
    with store.read_txn() as txn:
        dbs = store.dbs  # a read-only handle may have adopted the heap tables at this begin
        objects, records = objects_of(dbs), records_of(dbs)
        total = done = 0

        def tick() -> None:
            nonlocal done
            done += 1
            if progress is not None and done % PROGRESS_EVERY == 0:
                progress(done, total)

        try:
            # Counted inside the try: LMDB's mdb_stat reads a table's root without saying
            # that it could not (a damaged table record), and the txn's next call fails
            # MDB_BAD_TXN; before the try that was "LMDB failed", exit 7, not damage (cli96).
            total = (
                objects.count(txn)
                + records.count(txn)
                + sum(txn.stat(dbs[name])["entries"] for name in ("refs", "ledgers"))
            )
            for key, value in objects.items(txn):
                tick()
                counts["objects"] += 1
                if value is not None:  # a damaged location: heap_problems names it
                    got = stored_key(key, value)  # a frame: its chunk's digest (issue 16)
                    if len(key) not in (DIGEST_SIZE, FRAME_KEY_SIZE) or got != bytes(key):
                        problems.append(
                            Problem(
                                "object bytes do not match their digest",
                                f"objects/{bytes(key).hex()}",
                                expected=bytes(key).hex(),
                                got=got.hex(),
                            )
                        )
            for key, value in records.items(txn):
                tick()
                counts["checkpoints"] += 1
                if value is not None:
                    _check_checkpoint(txn, dbs, key, value, problems, parents=parents)
            problems.extend(heap_problems(txn, dbs))
            if store.layout_in(txn) == 1:  # read-only open of a layout-1 store: no checks stored
                with txn.cursor(db=dbs["refs"]) as cur:
                    for key, value in cur:
                        tick()
                        counts["refs"] += 1
                        if not records.exists(txn, bytes(value)):
                            run, branch = split_ref_key(key)
                            problems.append(
                                Problem(
                                    "ref does not resolve",
                                    f"refs/{run}/{branch}",
                                    expected=bytes(value).hex(),
                                )
                            )
            else:
                counts["refs"] = check_refs(txn, dbs, problems)
                for _ in range(counts["refs"]):
                    tick()
            problems.extend(_kept_count(txn, dbs, counts["refs"]))
            for cid, holds in retained_heads(txn, dbs["meta"]).items():
                if holds is None:  # still a root; its holders cannot be read or released
                    problems.append(
                        Problem(
                            "retained head row is malformed",
                            f"meta/retained/{cid.hex()}",
                            expected="a v1 hold map or [2, two or more holds]",
                        )
                    )
                for audit in unbacked_holds(txn, dbs, cid, holds or []):
                    problems.append(
                        Problem(
                            "retained hold names no audit record that retained it",
                            f"meta/retained/{cid.hex()}",
                            expected="a ref_reset away from it or a ref_repair keeping it",
                            got=audit,
                        )
                    )
                if not records.exists(txn, cid):
                    problems.append(
                        Problem(
                            "retained head does not resolve",
                            f"meta/retained/{cid.hex()}",
                            expected=cid.hex(),
                        )
                    )
            for key in pinned_objects(txn, dbs["meta"]):
                if _peek(txn, objects, key) is None:
                    problems.append(
                        Problem(
                            "pinned object does not resolve",
                            f"meta/pinned/{key.hex()}",
                            expected=key.hex(),
                        )
                    )
            indexed = check_index(txn, dbs, problems, parents)
            if indexed:
                counts["langgraph"] = indexed
            with txn.cursor(db=dbs["ledgers"]) as cur:
                for key, _ in cur:
                    tick()
                    counts["ledgers"] += 1
                    if _peek(txn, objects, bytes(key)) is None:
                        problems.append(
                            Problem(
                                "sealed ledger does not resolve",
                                f"ledgers/{bytes(key).hex()}",
                                expected=bytes(key).hex(),
                            )
                        )
                        continue
                    try:
                        entries = _decode_list(txn, objects, bytes(key))
                        payloads = [bytes(entry[2]) for entry in entries]
                    except (CpstoreError, TypeError, ValueError, IndexError, KeyError) as exc:
                        problems.append(
                            Problem(
                                "sealed ledger object is malformed",
                                f"ledgers/{bytes(key).hex()}",
                                got=str(exc),
                            )
                        )
                        continue
                    for i, payload in enumerate(payloads):
                        if _peek(txn, objects, payload) is None:
                            problems.append(
                                Problem(
                                    "ledger payload does not resolve",
                                    f"ledgers/{bytes(key).hex()}[{i}]",
                                    expected=payload.hex(),
                                    position=i,
                                )
                            )
            counts["tombstones"] = txn.stat(dbs["tombstones"])["entries"]
            counts["audit"], audit_problems = check_audit_chain(txn, dbs)
            if store.audit_key is not None:
                audit_problems.extend(check_macs(txn, dbs, store.audit_key))
            problems.extend(audit_problems)
        except store.engine_error as exc:
            problems.append(
                Problem("LMDB reported an error while walking", "data.mdb", got=str(exc))
            )
    if progress is not None:
        progress(total, total)
    return VerifyReport(ok=not problems, problems=tuple(problems), counts=counts)
