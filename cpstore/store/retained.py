"""Retained heads: checkpoints an audited ref move keeps, each with every hold on it.

A *hold* is ``{"run", "branch", "audit"}``: the audit record (a ``ref_reset``, a
``ref_repair``) that keeps the checkpoint, and the ref it was kept for. A checkpoint is
a retention root (its whole lineage survives ``prune``) while any hold on it stands.
Until holders69 the ``meta`` row held one hold, so a second hold on the same
checkpoint (a repair keeping a vanished fork at a head a reset already retained, two
branches reset away from one head) replaced or skipped it, and releasing the first let
the next sweep take what the second still had a reason to keep.

Row (docs/store.md, docs/format.md "Retained-head rows"): key ``b"retained/"`` ‖
checkpoint id; value v1, the canonical map of the one hold (what every cpstore wrote
before, and still writes for a single hold), or v2, the canonical array ``[2, holds]``
with two or more holds (distinct audit digests, oldest first). A reader tells them
apart by shape; anything else is malformed: still a root (the key names the
checkpoint), reported by ``verify()``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from cpstore.errors import CpstoreError, IntegrityError, NotFoundError, SeveralHoldersError
from cpstore.native.canonical import decode_value, encode_value
from cpstore.store.audit import append_audit_txn
from cpstore.store.audit_read import _get as get_record
from cpstore.store.backend import Backend, Txn
from cpstore.store.model import AuditRecord, check_name, parse_id

__all__ = [
    "RETAINED_PREFIX",
    "RETAINED_VERSION",
    "add_hold",
    "decode_holds",
    "encode_holds",
    "holds_on_runs",
    "release_retained",
    "release_retained_by",
    "retained",
    "retained_heads",
    "retained_key",
    "unbacked_holds",
]

#: ``meta`` keys of retained heads: retention treats each as a root (its whole
#: lineage) until every hold on it is released.
RETAINED_PREFIX = b"retained/"

#: The row version written for two or more holds (``[2, holds]``); one hold is the v1 map.
RETAINED_VERSION = 2

_HOLD_KEYS = frozenset(("run", "branch", "audit"))

Hold = dict[str, str]


def retained_key(cid: bytes) -> bytes:
    """``meta`` key of a retained head."""
    return RETAINED_PREFIX + bytes(cid)


def _hold(value: Any) -> Hold | None:
    if not isinstance(value, dict) or set(value) != _HOLD_KEYS:
        return None
    if not all(isinstance(value[k], str) for k in _HOLD_KEYS):
        return None
    audit = value["audit"]
    if len(audit) != 32 or audit.strip("0123456789abcdef"):
        return None
    return {"run": value["run"], "branch": value["branch"], "audit": audit}


def decode_holds(raw: bytes | memoryview) -> list[Hold] | None:
    """The holds of a row's value, oldest first, or None when it is malformed."""
    try:
        value = decode_value(raw)
    except CpstoreError:
        return None
    if isinstance(value, dict):
        one = _hold(value)
        return None if one is None else [one]
    if not (isinstance(value, list) and len(value) == 2 and value[0] == RETAINED_VERSION):
        return None
    if not isinstance(value[1], list) or len(value[1]) < 2:
        return None
    holds = [_hold(h) for h in value[1]]
    if any(h is None for h in holds):
        return None
    out = [h for h in holds if h is not None]
    if len({h["audit"] for h in out}) != len(out):
        return None
    return out


def encode_holds(holds: list[Hold]) -> bytes:
    """A row's value: the v1 map for one hold, ``[2, holds]`` for more."""
    if not holds:
        raise ValueError("a retained row holds at least one hold")
    if len(holds) == 1:
        return encode_value(dict(holds[0]))
    return encode_value([RETAINED_VERSION, [dict(h) for h in holds]])


def retained_heads(
    txn: Any, meta: Any, *, needles: Collection[bytes] | None = None
) -> dict[bytes, list[Hold] | None]:
    """Retained head id -> its holds (oldest first), None for a malformed row (a root still),
    in row order.

    ``needles``: only the rows whose value bytes hold one of them are decoded and listed
    (none: no row), a cheap prefilter that leaves choosing among the decoded holds to the
    caller (:func:`holds_on_runs`). Every other caller lists every row: each is a root."""
    out: dict[bytes, list[Hold] | None] = {}
    skip = len(RETAINED_PREFIX)
    with txn.cursor(db=meta) as cur:
        found = cur.set_range(RETAINED_PREFIX)
        while found:
            key = bytes(cur.key())
            if not key.startswith(RETAINED_PREFIX):
                break
            if needles is None:
                out[key[skip:]] = decode_holds(cur.value())
            else:
                raw = bytes(cur.value())
                if any(needle in raw for needle in needles):
                    out[key[skip:]] = decode_holds(raw)
            found = cur.next()
    return out


def holds_on_runs(backend: Backend, runs: Iterable[str]) -> list[tuple[str, Hold]]:
    """(retained head id, hold) for every hold on one of ``runs``, in row order, as
    :func:`retained` lists them (a malformed row: none), in one read txn.

    A row's value is decoded only when its bytes hold one of the runs' names
    (:func:`retained_heads`' ``needles``): a canonical str is its UTF-8 bytes as they are
    (a lone surrogate is refused, so a name holding one names no hold). A keep_latest
    prune and each delete_thread ask this for one thread's runs beside every other hold
    of the store: decoding every row (:func:`retained`) cost them ~256 ms per call beside
    10 000 holds of other runs (left90)."""
    wanted: set[str] = set()
    needles: list[bytes] = []
    for run in runs:
        try:
            needles.append(run.encode("utf-8"))
        except UnicodeEncodeError:  # no stored hold names it
            continue
        wanted.add(run)
    if not wanted:
        return []
    with backend.read_txn() as txn:
        heads = retained_heads(txn, backend.db("meta"), needles=needles)
    return [
        (cid.hex(), h) for cid, holds in heads.items() for h in holds or [] if h["run"] in wanted
    ]


def add_hold(txn: Any, meta: Any, cid: bytes, *, run: str, branch: str, audit: str) -> None:
    """Add a hold on ``cid`` in the caller's write txn, beside any it has.

    A malformed row, whose holders cannot be read, refuses (IntegrityError; the caller's
    txn, a reset or a repair, is rolled back). review69: it was replaced by the new hold,
    so verify stopped reporting it and the new holder's release let the next sweep take
    what the unreadable holds still kept; ``release_retained(id)`` drops it, audited.
    """
    key = retained_key(cid)
    stored = txn.get(key, None, meta)
    holds = [] if stored is None else decode_holds(stored)
    if holds is None:
        raise IntegrityError(
            "a retained head row is malformed: its holds cannot be read, and a hold added "
            "would replace them (verify reports it; find its holders in the audit log, "
            "then release_retained(id) / cpstore retained --release drops it, audited)",
            where=f"meta/retained/{bytes(cid).hex()}",
            expected="a v1 hold map or [2, two or more holds]",
            got=bytes(stored)[:64].hex(),
        )
    if any(h["audit"] == audit for h in holds):
        return
    holds.append({"run": run, "branch": branch, "audit": audit})
    txn.put(key, encode_holds(holds), db=meta)


def _holds_made(kind: str, body: Any) -> set[str]:
    """The checkpoints (hex) an audit record of ``kind`` made a hold on."""
    if not isinstance(body, dict):
        return set()
    if kind == "ref_reset":
        old, new = body.get("old"), body.get("new")
        return {old} if isinstance(old, str) and old != new else set()
    if kind == "ref_repair":
        kept = body.get("kept")
        made = {k for k in kept if isinstance(k, str)} if isinstance(kept, list) else set()
        return made | ({body["retained"]} if isinstance(body.get("retained"), str) else set())
    return set()


def unbacked_holds(txn: Any, dbs: Any, cid: bytes, holds: list[Hold]) -> list[str]:
    """The audit digests of ``holds`` on ``cid`` that name no audit record holding it (no
    record with that digest, or one that is not a ``ref_reset`` away from ``cid`` nor a
    ``ref_repair`` retaining or keeping it): a hold written or moved behind cpstore's
    back, which keeps its lineage until released (``verify()`` reports it; review69)."""
    out: list[str] = []
    for h in holds:
        try:
            rec = get_record(txn, dbs, h["audit"])
        except CpstoreError:  # none (NotFoundError), or a damaged log (verify says so too)
            out.append(h["audit"])
            continue
        if bytes(cid).hex() not in _holds_made(rec.kind, rec.body):
            out.append(h["audit"])
    return out


def retained(backend: Backend) -> dict[str, dict[str, Any]]:
    """Id -> ``{"run", "branch", "audit", "holds"}``: ``holds`` every hold, oldest
    first; the other three the oldest hold's (None for a malformed row)."""
    with backend.read_txn() as txn:
        heads = retained_heads(txn, backend.db("meta"))
    out: dict[str, dict[str, Any]] = {}
    for cid, holds in heads.items():
        first: dict[str, Any] = dict(holds[0]) if holds else dict.fromkeys(_HOLD_KEYS)
        out[cid.hex()] = {**first, "holds": [dict(h) for h in holds or []]}
    return out


def _drop(txn: Any, meta: Any, cid: bytes, holds: list[Hold], audit: str | None) -> list[str]:
    """Drop ``audit``'s hold (None: the whole row); the holders left."""
    left = [h for h in holds if audit is not None and h["audit"] != audit]
    if left:
        txn.put(retained_key(cid), encode_holds(left), db=meta)
    else:
        txn.delete(retained_key(cid), db=meta)
    return [h["audit"] for h in left]


def _record(
    backend: Backend,
    txn: Txn[memoryview],
    cid: bytes,
    held: tuple[str | None, list[str]],
    who_why_when: tuple[str, str, float],
) -> AuditRecord:
    holder, left = held
    who, why, when = who_why_when
    # The hold released (None: a malformed row, dropped whole) and the holders left
    # (none: the next prune may sweep it).
    body = {
        "checkpoint": cid.hex(),
        "holder": holder,
        "holders_left": left,
        "operator": who,
        "reason": why,
    }
    return append_audit_txn(backend, txn, "retained_release", body, when)


def release_retained(
    backend: Backend,
    checkpoint_id: str,
    *,
    operator: str,
    reason: str,
    holder: str | None = None,
) -> AuditRecord:
    """Release one hold on a retained head, audited (a ``retained_release`` record).

    ``holder``: the audit digest of the hold to release; needed when several audit
    records hold the checkpoint (:class:`SeveralHoldersError` lists them, nothing
    released), optional when one does. NotFoundError when the checkpoint is not
    retained, or not by ``holder``. The next prune may sweep it once no hold is left.
    """
    cid = parse_id(checkpoint_id)
    named = None if holder is None else parse_id(holder, "holder audit digest").hex()
    stamp = (check_name(operator, "operator"), check_name(reason, "reason"), float(backend.now()))

    def release(txn: Txn[memoryview]) -> AuditRecord:
        meta = backend.db("meta")
        stored = txn.get(retained_key(cid), None, meta)
        if stored is None:
            raise NotFoundError("no retained head with this id", where="retained", got=cid.hex())
        holds = decode_holds(stored)
        holders = [h["audit"] for h in holds or []]
        if named is None and len(holders) > 1:
            raise SeveralHoldersError(
                f"{len(holders)} audit records hold this retained head: name the one to "
                "release (holder=, cpstore retained --holder); each has its reason to keep it",
                where=f"retained/{cid.hex()}",
                expected=holders,
                got=None,
            )
        if named is not None and named not in holders:
            raise NotFoundError(
                "this retained head is not held by that audit record",
                where=f"retained/{cid.hex()}",
                expected=holders,
                got=named,
            )
        audit = named if named is not None else (holders[0] if holders else None)
        left = _drop(txn, meta, cid, holds or [], audit)
        return _record(backend, txn, cid, (audit, left), stamp)

    result: AuditRecord = backend.write_txn(release)
    return result


def release_retained_by(
    backend: Backend, audit_digest: str, *, operator: str, reason: str
) -> list[AuditRecord]:
    """Release every hold the audit record ``audit_digest`` made (a ``ref_repair``'s
    ``retained`` and ``kept``, a ``ref_reset``'s old head), in one write txn: one
    ``retained_release`` record per hold, as :func:`release_retained` writes. Another
    record's hold on the same checkpoint stands. NotFoundError when that record holds
    none."""
    digest = parse_id(audit_digest, "audit record digest").hex()
    stamp = (check_name(operator, "operator"), check_name(reason, "reason"), float(backend.now()))

    def release(txn: Txn[memoryview]) -> list[AuditRecord]:
        meta = backend.db("meta")
        heads = retained_heads(txn, meta)
        chosen = sorted(
            (cid, holds)
            for cid, holds in heads.items()
            if holds is not None and any(h["audit"] == digest for h in holds)
        )
        if not chosen:
            # A malformed row's holders cannot be read: it may be this record's (review69:
            # the message said none, and verify is what names such rows).
            unread = sum(1 for holds in heads.values() if holds is None)
            raise NotFoundError(
                "no retained head was kept by this audit record"
                + (
                    f" (or none readable: {unread} malformed retained row(s) cannot be "
                    "read, verify names them, release_retained(id) drops one)"
                    if unread
                    else ""
                ),
                where="retained",
                got=digest,
            )
        out: list[AuditRecord] = []
        for cid, holds in chosen:
            left = _drop(txn, meta, cid, holds, digest)
            out.append(_record(backend, txn, cid, (digest, left), stamp))
        return out

    result: list[AuditRecord] = backend.write_txn(release)
    return result
