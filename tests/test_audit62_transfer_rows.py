"""audit62: push/pull's decision transfer over a damaged decision-index row.

The source's standing decision about each checkpoint a transfer reads decides what is
carried (docs/store.md, "Decisions carried"). With the source's row of a QUARANTINE'd
checkpoint deleted, that read said "no decision": the checkpoint arrived with none and
the destination let anyone record on from it. A damaged destination row was overwritten
by the carried decision, unreported. Each is an ``AuditChainError`` now. LMDB and
PostgreSQL, as source and as destination.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
from audit_damage import flip_time, quarantined
from pg_cluster import fresh_url, pg_cluster  # noqa: F401 - fixtures
from test_decision_support import stored_replay

import cpstore
from cpstore.decision.validate import validate
from cpstore.errors import AuditChainError, GateError
from cpstore.store.audit import DECISION_PREFIX
from cpstore.store.facade import Store
from cpstore.store.transfer import transfer

PAIRS = [("lmdb", "lmdb"), ("lmdb", "postgresql"), ("postgresql", "lmdb")]


def _where(kind: str, tmp_path: Path, name: str) -> str:
    return str(tmp_path / name) if kind == "lmdb" else fresh_url()


def _damage(store: Store, cid: str, value: bytes | None) -> None:
    meta, key = store.backend.dbs["meta"], DECISION_PREFIX + bytes.fromhex(cid)
    store.backend.write_txn(
        lambda t: t.delete(key, db=meta) if value is None else t.put(key, value, db=meta)
    )


@pytest.mark.usefixtures("pg_cluster")
@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS)
@pytest.mark.parametrize(
    "value",
    [
        pytest.param(None, id="deleted"),
        pytest.param(b"\xff", id="flipped"),
    ],
)
def test_a_damaged_source_row_carries_no_wrong_standing(
    src_kind: str, dst_kind: str, value: bytes | None, tmp_path: Path
) -> None:
    src_at = _where(src_kind, tmp_path, "src")
    dst_at = _where(dst_kind, tmp_path, "dst")
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        cid = quarantined(src)
        _damage(src, cid, value)
        # Refused, or carried: the destination never holds the checkpoint without it.
        with contextlib.suppress(AuditChainError):
            transfer(src.backend, dst.backend)
        if dst.ref("r", "main") is not None:
            with pytest.raises(GateError):
                dst.recorder("r")
        assert dst.verify().ok


@pytest.mark.usefixtures("pg_cluster")
@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS)
def test_a_damaged_destination_row_is_refused_not_overwritten(
    src_kind: str, dst_kind: str, tmp_path: Path
) -> None:
    src_at = _where(src_kind, tmp_path, "src")
    dst_at = _where(dst_kind, tmp_path, "dst")
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        cid = quarantined(src)
        transfer(src.backend, dst.backend)
        second = validate(cid, stored_replay(src, cid, state_digest="x"), store=src)
        assert second.verdict.name == "REJECT"
        _damage(dst, cid, b"\xff")
        n = len(list(dst.audit_records()))
        with pytest.raises(AuditChainError):
            transfer(src.backend, dst.backend)
        assert len(list(dst.audit_records())) == n
        assert not dst.verify().ok


@pytest.mark.usefixtures("pg_cluster")
@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS)
def test_an_altered_source_decision_is_not_carried(
    src_kind: str, dst_kind: str, tmp_path: Path
) -> None:
    """A standing decision altered in place in the source (a byte of its time flipped; it
    still decodes) was carried with a digest the source's chain does not hold, and the
    destination verified clean: refused now, before anything lands."""
    src_at = _where(src_kind, tmp_path, "src")
    dst_at = _where(dst_kind, tmp_path, "dst")
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        quarantined(src)
        flip_time(src, 0)
        with pytest.raises(AuditChainError):
            transfer(src.backend, dst.backend)
        assert list(dst.audit_records()) == []
        assert dst.ref("r", "main") is None


@pytest.mark.usefixtures("pg_cluster")
@pytest.mark.parametrize(("src_kind", "dst_kind"), PAIRS)
def test_an_altered_superseded_quarantine_is_not_carried(
    src_kind: str, dst_kind: str, tmp_path: Path
) -> None:
    """A branch's first quarantine, since superseded by an ACCEPT, travels for its branch
    (docs/store.md, "Decisions carried"). Altered in place in the source (a byte of its
    time flipped; it still decodes) it was carried with a digest the source's chain does
    not hold: refused now, before anything lands."""
    src_at = _where(src_kind, tmp_path, "src")
    dst_at = _where(dst_kind, tmp_path, "dst")
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        cid = quarantined(src)
        assert validate(cid, stored_replay(src, cid), store=src).verdict.name == "ACCEPT"
        flip_time(src, 0)
        with pytest.raises(AuditChainError):
            transfer(src.backend, dst.backend)
        assert list(dst.audit_records()) == []
        assert dst.ref("r", "main") is None
