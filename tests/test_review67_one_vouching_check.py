"""review67: one vouching check, ``AuditView.check_vouched``, for every reader.

The gates, push/pull's carried decisions and ``cpstore audit`` each compared a record's
digest with what the chain vouches for (the next record's ``prev``, or the head's) in
their own copy, and told it apart: the gates at ``audit[i]``, the others at ``audit/i``,
``latest_decision`` without the digests. Now one method does it: the same altered record
is refused by all three at ``audit/<index>``, the expected and found digests in each. A
caller holding the next listed record (the CLI's listing) passes it as ``after`` and no
read is made. The gates' other refusals that name a record name it as ``audit/<index>``
too. Both backends.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from audit_damage import flip_time, quarantined
from pg_cluster import fresh_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.cli import main
from cpstore.cli.exit_codes import EXIT_INTEGRITY
from cpstore.decision.gates import check_resume, resume_gate, sign_off
from cpstore.errors import AuditChainError, GateError, SignOffError
from cpstore.store.audit import AuditView
from cpstore.store.model import AuditRecord
from cpstore.store.transfer import transfer

_INDEX = struct.Struct(">Q")


def _at(kind: str, tmp_path: Path, name: str) -> str:
    return str(tmp_path / name) if kind == "lmdb" else fresh_url()


@pytest.mark.usefixtures("pg_cluster")
@pytest.mark.parametrize("kind", ["lmdb", "postgresql"])
def test_gate_transfer_and_listing_refuse_alike(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src_at, dst_at = _at(kind, tmp_path, "src"), _at(kind, tmp_path, "dst")
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        cid = quarantined(src)
        [decision] = list(src.audit_records(kind="decision"))
        flip_time(src, decision.index)
        [altered] = list(src.audit_records(start=decision.index, limit=1))
        assert altered.digest != decision.digest  # still decodes, another digest
        want = (f"audit/{decision.index}", decision.digest, altered.digest)
        with pytest.raises(AuditChainError) as gate:
            resume_gate(src, cid, decision.body["decision_id"])
        with pytest.raises(AuditChainError) as carried:
            transfer(src.backend, dst.backend)
        assert dst.ref("r", "main") is None  # nothing carried
        for caught in (gate.value, carried.value):
            assert (caught.where, caught.expected, caught.got) == want
    capsys.readouterr()
    assert main(["audit", "--store", src_at]) == EXIT_INTEGRITY
    err = capsys.readouterr().err
    assert f"at audit/{decision.index};" in err
    assert decision.digest in err and altered.digest in err


@pytest.mark.parametrize("kind", ["lmdb", "postgresql"])
@pytest.mark.usefixtures("pg_cluster")
def test_after_vouches_without_a_read(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cpstore.open(_at(kind, tmp_path, "s")) as store:
        for i in range(3):
            store.append_audit("note", {"i": i})
        first, second, third = list(store.audit_records())
        with store.backend.read_txn() as txn:
            view = AuditView(store.backend, txn)
            view.check_vouched(first)  # read: record 1's prev
            view.check_vouched(third)  # read: the head

            def no_read(index: int) -> str:
                raise AssertionError(f"read the chain at {index}")

            monkeypatch.setattr(view, "chained_digest", no_read)
            view.check_vouched(first, second)  # second.prev vouches
            other = AuditRecord(second.index, second.digest, "ab" * 16, "note", {}, 0.0)
            with pytest.raises(AuditChainError) as caught:
                view.check_vouched(first, other)  # what after says, unread
            assert (caught.value.where, caught.value.expected) == ("audit/0", "ab" * 16)
            with pytest.raises(AssertionError, match="read the chain at 0"):
                view.check_vouched(first, third)  # not the next record: read
            monkeypatch.undo()
            with pytest.raises(AuditChainError, match="nothing carried") as told:
                view.check_vouched(first, other, what="; nothing carried")
            assert told.value.what.endswith("(altered); nothing carried")


@pytest.mark.parametrize("kind", ["lmdb", "postgresql"])
@pytest.mark.usefixtures("pg_cluster")
def test_the_gates_name_a_record_as_audit_slash_index(kind: str, tmp_path: Path) -> None:
    with cpstore.open(_at(kind, tmp_path, "s")) as store:
        cid = quarantined(store)
        [decision] = list(store.audit_records(kind="decision"))
        d = decision.body["decision_id"]
        so = sign_off(store, d, operator="op", reason="drill")
        [signed] = list(store.audit_records(kind="signoff"))
        with pytest.raises(SignOffError) as again:
            sign_off(store, d, operator="op", reason="twice")
        assert again.value.where == f"audit/{signed.index}"
        permit = resume_gate(store, cid, d, sign_off=so)
        with pytest.raises(GateError) as other:
            check_resume(store, "0" * 32, run_id="r", branch="main", permit=permit)
        [gate] = list(store.audit_records(kind="gate"))
        assert other.value.where == f"audit/{gate.index}"
        check_resume(store, cid, run_id="r", branch="main", permit=permit)
        [used] = list(store.audit_records(kind="resume"))
        with pytest.raises(GateError) as twice:
            check_resume(store, cid, run_id="r", branch="main", permit=permit)
        assert twice.value.where == f"audit/{used.index}"
