"""Reading a checkpoint's entry and a branch head on a txn: the read rule every backend shares.

A backend's ``load_raw`` and ``head`` call these with its own table handles
(PostgreSQL adds its prefetch around them); the checks are the same on the
same bytes whatever the engine.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from cpstore.errors import IntegrityError, NotFoundError
from cpstore.native.binding import digest, digest_small
from cpstore.store.backend import Txn
from cpstore.store.fast_read import contents
from cpstore.store.manifest import check_manifest, check_manifest_state
from cpstore.store.model import _HEADER_SIZE, split_checkpoint_value, split_ref_key
from cpstore.store.ref_neighbours import refuse_damaged_neighbours
from cpstore.store.refs import check_ref_target, read_ref, unpack_ref

__all__ = ["absent_head", "read_entry", "read_head"]


def read_entry(
    txn: Txn[memoryview],
    dbs: Mapping[str, Any],
    cid: bytes,
    *,
    verify: bool,
    full: bool,
    hints: list[bytes] | None = None,
) -> tuple[dict[str, Any], bytes]:
    """(manifest map, 16-byte entry header) of checkpoint ``cid``, manifest hash-checked.

    ``full=False`` shape-checks only the version and the state (the reader
    checks the rest before it uses another field). The header's created_at
    check is :func:`~cpstore.store.model.created_at_of`'s, when created_at is used.
    ``hints`` (a list) gets the record's location hints appended (content.py).
    """
    records = contents(dbs)[1]
    if hints is None:
        value = records.get(txn, cid)
    else:
        value, block = records.hinted(txn, cid)
        hints.append(block)
    if value is None:
        pruned = txn.get(cid, db=dbs["tombstones"]) is not None
        raise NotFoundError(
            "checkpoint was pruned" if pruned else "no such checkpoint",
            where="checkpoints",
            got=cid.hex(),
        )
    if len(value) < _HEADER_SIZE:
        split_checkpoint_value(value, cid)  # raises, naming the checkpoint
    data = value[_HEADER_SIZE:]  # a view (buffers=True) or bytes: either decodes
    if verify and digest_small(data) != cid:
        raise IntegrityError(
            "manifest bytes do not match the checkpoint id",
            where=f"checkpoints/{cid.hex()}",
            expected=cid.hex(),
            got=digest(data).hex(),
        )
    header = bytes(value[:_HEADER_SIZE])
    return (check_manifest(cid, data) if full else check_manifest_state(cid, data)), header


def absent_head(txn: Txn[memoryview], dbs: Mapping[str, Any], key: bytes, *, layout: int) -> None:
    """For a head read that found ref ``key`` absent: IntegrityError when a ref row beside
    it fails its check (``ref_neighbours``): its key may be this ref's, damaged, and a
    resume reading "absent" would start the run anew (refkey100)."""
    refuse_damaged_neighbours(txn, dbs["refs"], key, unpack_ref, layout=layout)


def read_head(
    txn: Txn[memoryview],
    dbs: Mapping[str, Any],
    key: bytes,
    *,
    layout: int,
    load_raw: Callable[..., tuple[dict[str, Any], bytes]],
) -> bytes | None:
    """The checkpoint ref ``key`` names, or None; its check and target are verified.

    IntegrityError when the ref fails its check, names a checkpoint that is
    not stored, or one of another run (or branch, for a recorded head); and when
    it is absent while a ref row beside it fails its check (``ref_neighbours``).
    ``load_raw`` is the backend's (it may prefetch what a reader needs next).
    """
    found = read_ref(txn, dbs, key, layout=layout)
    if found is None:
        absent_head(txn, dbs, key, layout=layout)
        return None
    cid, origin = found
    try:
        raw, _ = load_raw(txn, cid, verify=True, full=False)
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
