"""Recorder.checkpoint(meta_expected=): a commit conditional on extension meta records."""

from __future__ import annotations

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError, InvalidInputError

_KEY = b"lg/test-key"


def test_a_record_that_changed_refuses_the_commit_and_nothing_is_written(url: str) -> None:
    """The record holds other bytes (or none): ConflictError, no checkpoint, no ref, no
    extra record; the bytes it holds: committed with the extra records."""
    with cpstore.open(url) as s:
        rec = s.recorder("run")
        rec.checkpoint(0, {"a": 0}, extra_meta=lambda cid: [(_KEY, b"one")])
        head = s.ref("run")
        with pytest.raises(ConflictError, match="changed since it was read") as info:
            s.recorder("run").checkpoint(
                1,
                {"a": 1},
                extra_meta=lambda cid: [(_KEY, b"two")],
                meta_expected=[(_KEY, b"not one")],
            )
        assert info.value.got == "another record"
        assert s.ref("run") == head and len(s.history("run")) == 1
        with s.backend.read_txn() as txn:
            assert bytes(txn.get(_KEY, db=s.backend.db("meta"))) == b"one"
        with pytest.raises(ConflictError) as info:
            s.recorder("run").checkpoint(1, {"a": 1}, meta_expected=[(b"lg/absent", b"x")])
        assert info.value.got == "missing"
        cid = s.recorder("run").checkpoint(
            1, {"a": 1}, extra_meta=lambda cid: [(_KEY, b"two")], meta_expected=[(_KEY, b"one")]
        )
        assert s.ref("run") == cid
        with s.backend.read_txn() as txn:
            assert bytes(txn.get(_KEY, db=s.backend.db("meta"))) == b"two"
        assert s.verify().ok


def test_a_key_outside_the_extension_prefixes_is_refused(url: str) -> None:
    with cpstore.open(url) as s:
        with pytest.raises(InvalidInputError, match="extension prefix"):
            s.recorder("run").checkpoint(0, {"a": 0}, meta_expected=[(b"refs", b"x")])
        assert s.runs() == []


def test_batched_mode_refuses_a_conditional_commit_and_drops_nothing(url: str) -> None:
    """A batched handle would check the condition at the flush, in one txn with every
    thread's queued checkpoints: one failed condition dropped them all (the caller was
    handed an id first). The call is refused instead, before anything is queued; the
    checkpoints queued before it commit at the flush."""
    with cpstore.open(url, durability="batched") as s:
        a = s.recorder("a")
        first = a.checkpoint(0, {"a": 0})
        with pytest.raises(InvalidInputError, match="batched") as info:
            s.recorder("b").checkpoint(0, {"b": 0}, meta_expected=[(_KEY, b"x")])
        assert info.value.got == "batched" and info.value.expected == ["sync", "none"]
        assert s.pending == 1
        second = a.checkpoint(1, {"a": 1})
        s.flush()  # before: ConflictError, and neither of run a's checkpoints stored
        assert s.runs() == ["a"] and [m.id for m in s.history("a")] == [second, first]


def test_an_expected_record_of_none_is_refused_with_what_it_expects(url: str) -> None:
    with cpstore.open(url) as s:
        with pytest.raises(InvalidInputError, match="holds bytes") as info:
            s.recorder("run").checkpoint(0, {"a": 0}, meta_expected=[(_KEY, None)])  # type: ignore[list-item]
        assert info.value.expected == "bytes" and info.value.where == f"meta/{_KEY!r}"
        assert s.runs() == []
