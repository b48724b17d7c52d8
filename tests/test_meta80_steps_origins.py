"""meta80: a step or a ref origin that is not one is refused with InvalidInputError
(what, where, expected, got) before anything is written, never read from a table's end
(``_STEPS[step]`` in manifest_encode, ``_ORIGIN_BYTE[origin]`` in refs: a negative
index takes an entry from the end). Steps enter through the recorder (``checkpoint``,
``observe``); origins are never a caller's (each is RECORDED, SET, ``ref_target``'s or a
stored ref's checked byte), so the refs module's writers check their own (a commit's
constant RECORDED goes through ``commit_ref``, unchecked: nothing on the put path).
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from pg_cluster import backend_store  # noqa: F401 - the ``store`` fixture

from cpstore.errors import CpstoreError, InvalidInputError
from cpstore.store import Store
from cpstore.store.manifest_encode import encode_recorded_manifest
from cpstore.store.model import ref_key
from cpstore.store.ref_table import replace_damaged_ref
from cpstore.store.refs import RECORDED, SET, pack_ref, read_ref, ref_hash, write_ref

_NOT_STEPS = [-1, -4096, -(2**63), 2**63, True, False, 1.5, "3", None]
_NOT_ORIGINS = [-1, -255, 2, 255, True, False, 1.0, "1", None]


def _refused(err: pytest.ExceptionInfo[InvalidInputError], where: str, got: Any) -> None:
    assert isinstance(err.value, CpstoreError)
    assert err.value.where == where
    assert err.value.expected is not None
    assert err.value.got is got or err.value.got == got


@pytest.mark.parametrize("bad", _NOT_STEPS, ids=repr)
def test_a_checkpoint_step_that_is_not_one_writes_nothing(store: Store, bad: Any) -> None:
    """Refused at the recorder naming its run and branch: no checkpoint, no ref, no run;
    the recorder goes on from where it was, and the store verifies."""
    rec = store.recorder("r")
    with pytest.raises(InvalidInputError) as err:
        rec.checkpoint(bad, {"a": 1})
    _refused(err, "run r branch main", bad)
    assert store.ref("r") is None and store.runs() == []
    first = rec.checkpoint(3, {"a": 1})
    with pytest.raises(InvalidInputError) as err:
        rec.checkpoint(bad, {"a": 2})
    _refused(err, "run r branch main", bad)
    assert store.ref("r") == first
    assert rec.checkpoint(4, {"a": 2}) == store.ref("r")
    assert store.verify().ok


@pytest.mark.parametrize("bad", _NOT_STEPS, ids=repr)
def test_an_observation_step_that_is_not_one_is_refused(store: Store, bad: Any) -> None:
    rec = store.recorder("r")
    with pytest.raises(InvalidInputError) as err:
        rec.observe(bad, "clock", b"x", pinned_at=None)
    _refused(err, "run r branch main observation", bad)
    cid = rec.checkpoint(0, {"a": 1})
    with store.read(cid) as cp:
        assert cp.observations() == []


def _manifest(step: Any) -> bytes:
    logs = dict.fromkeys(("observations", "call_graph", "effects", "harness", "transcript"))
    return encode_recorded_manifest(
        logs,
        run_id=b"\xa1r",
        branch=b"\xa4main",
        step=step,
        parent=None,
        state=b"\xc0",
        tokens=b"\xc0",
        ledger_sealed=True,
        tags=b"\x90",
        metadata=b"\x80",
    )


def test_the_manifest_encoder_never_reads_the_step_table_from_its_end() -> None:
    """Called directly (the recorder checks first): a negative step was encoded as step
    4,096 + step (-1 as 4,095); now refused. Steps in the table and past it encode as
    msgpack does."""
    for bad in (-1, -4096, -(2**63), 2**63):
        with pytest.raises(InvalidInputError):
            _manifest(bad)
    for step in (0, 1, 4095, 4096, 2**63 - 1):
        assert msgpack.packb(step) in _manifest(step)
    assert _manifest(4095) != _manifest(4096)


class _Writes:
    """A txn that counts the puts and deletes through it."""

    def __init__(self, txn: Any) -> None:
        self.txn, self.writes = txn, 0

    def put(self, *args: Any, **kwargs: Any) -> Any:
        self.writes += 1
        return self.txn.put(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        self.writes += 1
        return self.txn.delete(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.txn, name)


@pytest.mark.parametrize("bad", _NOT_ORIGINS, ids=repr)
def test_a_ref_origin_that_is_not_one_writes_nothing(store: Store, bad: Any) -> None:
    """write_ref and replace_damaged_ref given an origin that is not RECORDED or SET:
    InvalidInputError naming the ref, before any put or delete in the txn; the ref, the
    table digest and the store as they were."""
    rec = store.recorder("r")
    first = rec.checkpoint(0, {"a": 1})
    second = store.recorder("r", branch="b").checkpoint(1, {"a": 2})
    backend = store.backend
    key = ref_key("r", "main")

    def move(txn: Any) -> None:
        found = read_ref(txn, backend.dbs, key, layout=backend.layout)
        write_ref(txn, backend.dbs, key, bytes.fromhex(second), bad, old=found)

    def replace(txn: Any) -> None:
        replace_damaged_ref(txn, backend.dbs, key, bytes.fromhex(second), bad, count=2)

    for fn in (move, replace):
        seen: list[_Writes] = []

        def counted(txn: Any, fn: Any = fn, seen: list[_Writes] = seen) -> None:
            seen.append(_Writes(txn))
            fn(seen[-1])

        with pytest.raises(InvalidInputError) as err:
            backend.write_txn(counted)
        _refused(err, "refs/r/main", bad)
        assert seen and seen[0].writes == 0
    assert store.ref("r") == first
    assert store.verify().ok
    rec.checkpoint(2, {"a": 3})  # the recorder's commit (commit_ref) as before
    assert store.verify().ok


@pytest.mark.parametrize("bad", _NOT_ORIGINS, ids=repr)
def test_a_refs_value_or_hash_is_never_made_of_another_origin(bad: Any) -> None:
    key, cid = ref_key("r", "main"), bytes(16)
    for make in (pack_ref, ref_hash):
        with pytest.raises(InvalidInputError) as err:
            make(key, cid, bad)
        _refused(err, "refs/r/main", bad)
    assert pack_ref(key, cid, RECORDED) != pack_ref(key, cid, SET)
