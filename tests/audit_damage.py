"""Shared audit-log damage for the audit62/review67 tests: one quarantined checkpoint,
and a record altered in place so that it still decodes."""

from __future__ import annotations

from test_decision_support import stored_replay

from cpstore.decision.validate import validate
from cpstore.run.model import ReplayMode
from cpstore.store.audit_read import _INDEX
from cpstore.store.facade import Store


def quarantined(store: Store) -> str:
    """Record run ``r``'s checkpoint 1 with a live read and validate it best-effort: its
    standing decision (audit record 0 on a fresh store) is a QUARANTINE. Returns its id."""
    rec = store.recorder("r")
    rec.observe(1, "clock", b"t", pinned_at=1.0)
    rec.token("rng", 1)
    cid = str(rec.checkpoint(1, b"state"))
    validate(cid, stored_replay(store, cid, mode=ReplayMode.BEST_EFFORT), store=store)
    return cid


def flip_time(store: Store, index: int) -> None:
    """Flip the last byte of audit record ``index``'s ``time`` float, behind the store's
    back: the record still decodes, but its bytes are not the ones the chain vouches for."""
    audit, key = store.backend.dbs["audit"], _INDEX.pack(index)
    with store.backend.read_txn() as txn:
        raw = bytearray(bytes(txn.get(key, db=audit)))
    raw[raw.index(b"\xa4time\xcb") + 13] ^= 1
    store.backend.write_txn(lambda t: t.put(key, bytes(raw), db=audit))
    next(iter(store.audit_records(start=index, limit=1)))  # still decodes
