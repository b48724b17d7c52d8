"""Whole-store checks and retention: verify, mark-and-sweep, delete, prune.

``verify`` is composed of small per-entry checks and reports every problem as
data. Retention marks from every ref head (its whole lineage, or its newest
``keep_last`` checkpoints) and from every sealed ledger, then sweeps
checkpoints and objects nothing marked; pruned checkpoint ids get a tombstone
so a surviving child's ``parent`` is known to be pruned, not lost. Audit
records are never touched.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import lmdb

from ._canonical import decode_value, encode_value
from ._errors import CpstoreError
from ._native import digest, digest_batch
from ._records import DIGEST_SIZE
from ._store_audit import check_audit_chain
from ._store_env import Txn, load_chunked
from ._store_model import (
    Manifest,
    Problem,
    VerifyReport,
    decode_manifest,
    manifest_references,
    split_ref_key,
    unpack_checkpoint_value,
)

if TYPE_CHECKING:
    from ._store import Store

__all__ = ["delete_run", "prune", "verify"]


def _decode_list(txn: Txn[memoryview], objects: Any, key: bytes) -> list[Any]:
    raw = txn.get(key, db=objects)
    if raw is None:
        return []
    value = decode_value(raw)
    return value if isinstance(value, list) else []


def _children(txn: Txn[memoryview], objects: Any, field: str, key: bytes) -> Iterable[bytes]:
    """Objects an object names: chunks of a chunk index, payloads of a log."""
    if field.startswith("state.chunked"):
        raw = txn.get(key, db=objects)
        if raw is not None:
            _, keys = decode_value(raw)
            yield from keys
    elif field in ("observations", "effects"):
        slot = 2
        for entry in _decode_list(txn, objects, key):
            yield entry[slot]


# -- verify ---------------------------------------------------------------


def _check_tokens(
    txn: Txn[memoryview], objects: Any, where: str, log: Mapping[str, Any], problems: list[Problem]
) -> None:
    records = txn.get(log["records"], db=objects)
    values = txn.get(log["values"], db=objects)
    offsets = txn.get(log["offsets"], db=objects)
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
        digests = digest_batch(values, offsets)
    except CpstoreError as exc:
        problems.append(Problem("token value offsets are malformed", where, got=exc.what))
        return
    rec = records.cast("Q")
    dig = memoryview(digests).cast("Q")
    if rec[2::4].tolist() != dig[0::2].tolist() or rec[3::4].tolist() != dig[1::2].tolist():
        problems.append(Problem("token values do not match their records", where))


def _check_checkpoint(
    txn: Txn[memoryview],
    dbs: Mapping[str, Any],
    cid: bytes,
    value: memoryview,
    problems: list[Problem],
) -> None:
    where = f"checkpoints/{cid.hex()}"
    objects = dbs["objects"]
    created, data = unpack_checkpoint_value(value)
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
        return
    try:
        m = decode_manifest(cid, data, created)
    except CpstoreError as exc:
        problems.append(Problem(exc.what, exc.where or where, exc.expected, exc.got))
        return
    if m.parent is not None:
        parent = bytes.fromhex(m.parent)
        if (
            txn.get(parent, db=dbs["checkpoints"]) is None
            and txn.get(parent, db=dbs["tombstones"]) is None
        ):
            problems.append(
                Problem("parent checkpoint does not resolve", f"{where}.parent", expected=m.parent)
            )
    for field, key in manifest_references(m.raw):
        if txn.get(key, db=objects) is None:
            problems.append(
                Problem("reference does not resolve", f"{where}.{field}", expected=bytes(key).hex())
            )
            continue
        try:
            for i, child in enumerate(_children(txn, objects, field, key)):
                if txn.get(child, db=objects) is None:
                    problems.append(
                        Problem(
                            "reference does not resolve",
                            f"{where}.{field}[{i}]",
                            expected=bytes(child).hex(),
                        )
                    )
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


#: Entries between two progress reports of :func:`verify`.
PROGRESS_EVERY = 4096

Progress = Callable[[int, int], None]


def verify(store: Store, progress: Progress | None = None) -> VerifyReport:
    """Walk every database; see :meth:`Store.verify`."""
    dbs = store._e.dbs
    problems: list[Problem] = []
    counts = dict.fromkeys(("objects", "checkpoints", "refs", "ledgers", "tombstones", "audit"), 0)
    with store._read() as txn:
        total = sum(
            txn.stat(dbs[name])["entries"] for name in ("objects", "checkpoints", "refs", "ledgers")
        )
        done = 0

        def tick() -> None:
            nonlocal done
            done += 1
            if progress is not None and done % PROGRESS_EVERY == 0:
                progress(done, total)

        try:
            with txn.cursor(db=dbs["objects"]) as cur:
                for key, value in cur:
                    tick()
                    counts["objects"] += 1
                    got = digest(value)
                    if len(key) != DIGEST_SIZE or got != bytes(key):
                        problems.append(
                            Problem(
                                "object bytes do not match their digest",
                                f"objects/{bytes(key).hex()}",
                                expected=bytes(key).hex(),
                                got=got.hex(),
                            )
                        )
            with txn.cursor(db=dbs["checkpoints"]) as cur:
                for key, value in cur:
                    tick()
                    counts["checkpoints"] += 1
                    _check_checkpoint(txn, dbs, bytes(key), value, problems)
            with txn.cursor(db=dbs["refs"]) as cur:
                for key, value in cur:
                    tick()
                    counts["refs"] += 1
                    if txn.get(bytes(value), db=dbs["checkpoints"]) is None:
                        run, branch = split_ref_key(key)
                        problems.append(
                            Problem(
                                "ref does not resolve",
                                f"refs/{run}/{branch}",
                                expected=bytes(value).hex(),
                            )
                        )
            with txn.cursor(db=dbs["ledgers"]) as cur:
                for key, _ in cur:
                    tick()
                    counts["ledgers"] += 1
                    if txn.get(bytes(key), db=dbs["objects"]) is None:
                        problems.append(
                            Problem(
                                "sealed ledger does not resolve",
                                f"ledgers/{bytes(key).hex()}",
                                expected=bytes(key).hex(),
                            )
                        )
                        continue
                    for i, entry in enumerate(_decode_list(txn, dbs["objects"], bytes(key))):
                        if txn.get(entry[2], db=dbs["objects"]) is None:
                            problems.append(
                                Problem(
                                    "ledger payload does not resolve",
                                    f"ledgers/{bytes(key).hex()}[{i}]",
                                    expected=bytes(entry[2]).hex(),
                                )
                            )
            counts["tombstones"] = txn.stat(dbs["tombstones"])["entries"]
            counts["audit"], audit_problems = check_audit_chain(txn, dbs)
            problems.extend(audit_problems)
        except lmdb.Error as exc:
            problems.append(
                Problem("LMDB reported an error while walking", "data.mdb", got=str(exc))
            )
    if progress is not None:
        progress(total, total)
    return VerifyReport(ok=not problems, problems=tuple(problems), counts=counts)


# -- retention ---------------------------------------------------------------


def _sweep(store: Store, keep: Callable[[str], int | None], drop_run: str | None) -> int:
    dbs = store._e.dbs
    objects = dbs["objects"]
    now = store.now()

    def run(txn: Txn[memoryview]) -> int:
        if drop_run is not None:
            prefix = drop_run.encode("utf-8", "surrogatepass") + b"\0"
            with txn.cursor(db=dbs["refs"]) as cur:
                doomed = [bytes(k) for k, _ in cur if bytes(k).startswith(prefix)]
            for key in doomed:
                txn.delete(key, db=dbs["refs"])
        live_cps: dict[bytes, Manifest] = {}
        with txn.cursor(db=dbs["refs"]) as cur:
            heads = [(split_ref_key(k)[0], bytes(v)) for k, v in cur]
        for run_id, head in heads:
            limit = keep(run_id)
            cid: bytes | None = head
            walked = 0
            while cid is not None and (limit is None or walked < limit):
                value = txn.get(cid, db=dbs["checkpoints"])
                if value is None:
                    break
                walked += 1
                if cid in live_cps:
                    if limit is None:
                        break  # the rest of this lineage is already marked
                    m = live_cps[cid]
                else:
                    created, data = unpack_checkpoint_value(value)
                    m = decode_manifest(cid, bytes(data), created)
                    live_cps[cid] = m
                cid = None if m.parent is None else bytes.fromhex(m.parent)
        marked: set[bytes] = set()
        for m in live_cps.values():
            for field, key in manifest_references(m.raw):
                if key in marked:
                    continue
                marked.add(key)
                marked.update(bytes(c) for c in _children(txn, objects, field, key))
        with txn.cursor(db=dbs["ledgers"]) as cur:
            ledgers = [bytes(k) for k, _ in cur]
        for key in ledgers:
            marked.add(key)
            marked.update(bytes(c) for c in _children(txn, objects, "effects", key))
        # Only what a swept checkpoint named is a candidate: objects stored with
        # put_object and never referenced are the caller's, not garbage.
        candidates: set[bytes] = set()
        with txn.cursor(db=dbs["checkpoints"]) as cur:
            dead = [(bytes(k), bytes(v)) for k, v in cur if bytes(k) not in live_cps]
        tomb = encode_value({"pruned_at": now})
        for cid, entry in dead:
            created, data = unpack_checkpoint_value(entry)
            for field, key in manifest_references(decode_manifest(cid, data, created).raw):
                if key not in marked and key not in candidates:
                    candidates.add(key)
                    candidates.update(bytes(c) for c in _children(txn, objects, field, key))
            txn.delete(cid, db=dbs["checkpoints"])
            txn.put(cid, tomb, db=dbs["tombstones"])
        for key in candidates - marked:
            txn.delete(key, db=objects)
        return len(dead)

    removed: int = store._write(run)
    return removed


def delete_run(store: Store, run_id: str) -> int:
    """Drop every ref of ``run_id``, then sweep everything unreachable."""
    return _sweep(store, lambda _run: None, run_id)


def prune(store: Store, *, keep_last: int, run_id: str | None) -> int:
    """Keep each branch's newest ``keep_last`` checkpoints (of ``run_id`` or all runs)."""
    return _sweep(store, lambda run: keep_last if run_id is None or run == run_id else None, None)
