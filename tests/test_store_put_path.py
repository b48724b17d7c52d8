"""The checkpoint put path: its fast encoders equal the canonical ones; what it skips is sound."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from stored import raw_delete, raw_items

from cpstore.errors import IntegrityError, NotFoundError
from cpstore.native.binding import digest
from cpstore.native.canonical import decode_value, encode_value
from cpstore.store import commit as commit_module
from cpstore.store import lmdb_pages
from cpstore.store.content import objects_of
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.lmdb_pages import TailCover
from cpstore.store.manifest import (
    encode_digest_map,
    encode_manifest,
    encode_recorded_manifest,
    encode_state,
    manifest_references,
    referenced_digests,
)
from cpstore.store.model import (
    CheckpointWrite,
    check_metadata,
    checked_metadata,
    ref_key,
    unpack_checkpoint_value,
)
from cpstore.store.ref_table import check_refs
from cpstore.store.refs import read_ref, read_ref_hashed, write_ref

_digests = st.binary(min_size=16, max_size=16)
_opt = st.one_of(st.none(), _digests)
_names = st.text(st.characters(codec="utf-8"), min_size=1, max_size=12)
_LOGS = ("observations", "call_graph", "effects", "harness", "transcript")
_BARE: dict[str, Any] = {
    "parent": None,
    "logs": dict.fromkeys(_LOGS),
    "tags": [],
    "meta": {},
    "tokens": None,
}
_TOKENS = {"records": b"r" * 16, "values": b"v" * 16, "offsets": b"o" * 16, "count": 7, "kinds": {}}


def _d(i: int) -> bytes:
    return digest(b"%d" % i)


class TestEncoders:
    @settings(max_examples=200, deadline=None)
    @given(st.dictionaries(_names, _digests, max_size=40))
    def test_digest_map_equals_the_canonical_encoding(self, parts: dict[str, bytes]) -> None:
        """encode_digest_map (its cached key order included) equals encode_value of the map."""
        assert encode_digest_map(parts) == encode_value(parts)
        again = {name: digest(key) for name, key in reversed(list(parts.items()))}
        assert encode_digest_map(again) == encode_value(again)  # same names, another order

    @settings(max_examples=100, deadline=None)
    @given(
        st.dictionaries(_names, _digests, max_size=20),
        st.dictionaries(_names, _digests, max_size=3),
        st.sampled_from(["parts", "bytes"]),
    )
    def test_state_map_equals_the_canonical_encoding(
        self, parts: dict[str, bytes], chunked: dict[str, bytes], kind: str
    ) -> None:
        """encode_state equals encode_value of the state map, for both kinds."""
        state = {"kind": kind, "digest": _d(1), "parts": parts, "chunked": chunked}
        assert encode_state(state, encode_value(parts)) == encode_value(state)

    @settings(max_examples=200, deadline=None)
    @given(
        step=st.integers(0, 2**63 - 1),
        parent=_opt,
        logs=st.fixed_dictionaries(
            {k: _opt for k in ("observations", "call_graph", "effects", "harness", "transcript")}
        ),
        sealed=st.booleans(),
        tags=st.lists(_names, max_size=4),
        meta=st.dictionaries(_names, st.integers(), max_size=3),
        tokens=st.one_of(st.none(), st.just(_TOKENS)),
    )
    # The encoder's table of small steps ends at 4096 (trim76): each side of it, and the ends.
    @example(step=0, sealed=False, **_BARE)
    @example(step=127, sealed=True, **_BARE)
    @example(step=4095, sealed=True, **_BARE)
    @example(step=4096, sealed=True, **_BARE)
    @example(step=2**63 - 1, sealed=True, **_BARE)
    def test_recorded_manifest_equals_the_canonical_encoding(  # noqa: PLR0917 - given's arguments
        self,
        step: int,
        parent: bytes | None,
        logs: dict[str, bytes | None],
        sealed: bool,
        tags: list[str],
        meta: dict[str, int],
        tokens: dict[str, Any] | None,
    ) -> None:
        """The recorder's straight-line manifest encoder equals encode_manifest of the same map."""
        state = {"kind": "parts", "digest": _d(9), "parts": {"a": _d(4)}, "chunked": {}}
        fields = {
            "run_id": "run",
            "branch": "main",
            "step": step,
            "parent": parent,
            "state": state,
            "tokens": tokens,
            "ledger_sealed": sealed,
            "tags": tags,
            "metadata": meta,
            **logs,
        }
        got = encode_recorded_manifest(
            logs,
            run_id=encode_value("run"),
            branch=encode_value("main"),
            step=step,
            parent=parent,
            state=encode_value(state),
            tokens=encode_value(tokens),
            ledger_sealed=sealed,
            tags=encode_value(tags),
            metadata=encode_value(meta),
        )
        assert got == encode_manifest(fields)

    def test_referenced_digests_are_manifest_references(self, tmp_path: Path) -> None:
        """The recorder's set of named digests is exactly what manifest_references lists."""
        with open_store(tmp_path / "s") as store:
            rec = store.recorder("r")
            rec.token("clock", 1)
            rec.observe(0, "src", b"p", pinned_at=None)
            rec.effect("t", b"e")
            rec.transcript(b"tr")
            ids = [
                rec.checkpoint(0, {"a": 1, "big": os.urandom(300 * 1024)}),
                rec.checkpoint(1, b"raw bytes"),
                rec.checkpoint(2, os.urandom(300 * 1024)),
            ]
            with store.backend.read_txn() as txn:
                for cid in ids:
                    raw = store.backend.load_raw(txn, bytes.fromhex(cid), verify=True)[0]
                    want = {key for _, key in manifest_references(raw)}
                    assert referenced_digests(raw) == want

    def test_checked_metadata_returns_the_bytes_it_checked(self) -> None:
        """checked_metadata gives check_metadata's map and its canonical bytes."""
        meta = {"b": [1, "x"], "a": None}
        got, encoded = checked_metadata(meta, "metadata")
        assert got == check_metadata(meta, "metadata") and encoded == encode_value(meta)
        assert checked_metadata(None, "metadata") == ({}, encode_value({}))


class TestMustExist:
    def _ops(self, store: Store, monkeypatch: pytest.MonkeyPatch) -> list[CheckpointWrite]:
        ops: list[CheckpointWrite] = []
        real = store.backend.commit

        def spy(op: CheckpointWrite) -> None:
            ops.append(op)
            real(op)

        monkeypatch.setattr(store.backend, "commit", spy)
        return ops

    def test_extending_a_head_reads_every_named_object_it_does_not_write(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Unchanged parts of the head are read in the commit txn; new ones are written."""
        with open_store(tmp_path / "s") as store:
            rec = store.recorder("r")
            rec.token("clock", 1)
            rec.checkpoint(0, {"a": "x", "b": "y"})
            store.recorder("r").checkpoint(1, {"a": "x", "b": "y"})  # a recorder opened on the head
            ops = self._ops(store, monkeypatch)
            again = store.recorder("r")
            again.checkpoint(2, {"a": "x", "b": "z"})
            again.checkpoint(3, {"a": "x", "b": "z"})
            x, z = digest(encode_value("x")), digest(encode_value("z"))
            assert x in ops[0].must_exist and x in ops[1].must_exist
            assert z in ops[0].objects and z not in ops[0].must_exist
            assert z in ops[1].must_exist  # written by the previous commit, read by this one
            assert store.verify().ok

    def test_a_forks_first_commit_still_reads_every_inherited_object(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A fork extends no head: every object it inherits is read in its commit txn."""
        with open_store(tmp_path / "s") as store:
            rec = store.recorder("r")
            rec.observe(0, "src", b"payload", pinned_at=None)
            first = rec.checkpoint(0, {"a": "x"})
            ops = self._ops(store, monkeypatch)
            store.recorder("r", branch="b", parent=first).checkpoint(1, {"a": "x"})
            assert digest(encode_value("x")) in ops[0].must_exist
            assert digest(b"payload") in ops[0].must_exist

    def test_a_fork_whose_inherited_object_vanished_is_refused(self, tmp_path: Path) -> None:
        """An inherited object missing at a fork's first commit: IntegrityError, nothing stored."""
        with open_store(tmp_path / "s") as store:
            first = store.recorder("r").checkpoint(0, {"a": "x"})
            fork = store.recorder("r", branch="b", parent=first)
            with store.backend.env.env.begin(write=True) as txn:  # damage behind the store's back
                raw_delete(txn, store.backend.dbs, "objects", digest(encode_value("x")))
            with pytest.raises(IntegrityError, match="not stored"):
                fork.checkpoint(1, {"a": "x"})
            assert store.ref("r", "b") is None

    def test_objects_to_check_reads_named_and_inherited_it_does_not_write(self) -> None:
        """Every named or inherited object the txn does not write is read, head or not."""
        named, inherited = {_d(1), _d(2), _d(3)}, {_d(4)}
        got = commit_module.objects_to_check(named, {_d(1): b""}, inherited=inherited)
        assert sorted(got) == sorted([_d(2), _d(3), _d(4)])
        assert set(commit_module.objects_to_check(named, {}, inherited=set())) == named

    def test_a_head_whose_object_vanished_refuses_the_next_checkpoint(self, tmp_path: Path) -> None:
        """An object of the head deleted behind the store's back: the next commit is refused."""
        with open_store(tmp_path / "s") as store:
            rec = store.recorder("r")
            head = rec.checkpoint(0, {"a": "x", "b": "y"})
            with store.backend.env.env.begin(write=True) as txn:  # damage behind the store's back
                raw_delete(txn, store.backend.dbs, "objects", digest(encode_value("x")))
            with pytest.raises(IntegrityError, match="not stored"):
                rec.checkpoint(1, {"a": "x", "b": "z"})
            assert store.ref("r", "main") == head


class TestRefWrite:
    def test_a_cas_with_the_hashed_old_ref_moves_the_digest_like_the_plain_one(
        self, tmp_path: Path
    ) -> None:
        """write_ref given read_ref_hashed's old ref leaves the table digest check_refs expects."""
        with open_store(tmp_path / "s") as store:
            rec = store.recorder("r")
            ids = [bytes.fromhex(rec.checkpoint(i, {"i": i})) for i in range(5)]
            dbs, key = store.backend.env.dbs, ref_key("r", "main")

            def move(txn: Any) -> None:
                for i, cid in enumerate(reversed(ids)):
                    hashed = read_ref_hashed(txn, dbs, key, layout=2)
                    plain = read_ref(txn, dbs, key, layout=2)
                    assert hashed is not None and hashed[:2] == plain
                    write_ref(txn, dbs, key, cid, 0, old=hashed if i % 2 else plain)

            store.backend.write_txn(move)
            with store.backend.read_txn() as txn:
                problems: list[Any] = []
                check_refs(txn, dbs, problems)
                assert problems == []
                assert read_ref(txn, dbs, key, layout=2) == (ids[0], 0)


class TestTailCover:
    def test_the_tail_is_covered_a_step_ahead_and_then_left_alone(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """One fill (zeros, read back) reaches the next step; txns inside it make no system call."""
        data = tmp_path / "data.mdb"
        data.write_bytes(b"\0" * 4096)
        tail = TailCover(str(data), 4096)
        tail.cover(1)
        assert data.stat().st_size == 2 * 4096  # not known to be a store yet: exactly
        tail.ahead = True
        tail.cover(9)
        assert data.stat().st_size == lmdb_pages.TAIL_STEP
        assert data.read_bytes() == bytes(lmdb_pages.TAIL_STEP)
        calls: list[int] = []
        monkeypatch.setattr(os, "fstat", calls.append)
        tail.cover(lmdb_pages.TAIL_STEP // 4096 - 1)
        assert calls == []
        monkeypatch.undo()
        tail.cover(lmdb_pages.TAIL_STEP // 4096)
        assert data.stat().st_size == 2 * lmdb_pages.TAIL_STEP
        tail.close()
        assert tail.fd is None

    def test_short_writes_still_fill_the_tail_with_zeros_to_the_step(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Zeros written in pieces (and a write that takes fewer bytes) reach the step exactly."""
        data = tmp_path / "data.mdb"
        data.write_bytes(b"\1" * 4096)
        real = os.pwrite
        sizes: list[int] = []

        def short(fd: int, buf: memoryview, offset: int) -> int:
            sizes.append(len(buf))
            return real(fd, buf[:10_000], offset)  # a short write: the loop goes on

        monkeypatch.setattr(os, "pwrite", short)
        tail = TailCover(str(data), 4096)
        tail.ahead = True
        tail.cover(3)
        monkeypatch.undo()
        tail.close()
        assert data.stat().st_size == lmdb_pages.TAIL_STEP
        assert data.read_bytes() == b"\1" * 4096 + bytes(lmdb_pages.TAIL_STEP - 4096)
        assert tail.covered == lmdb_pages.TAIL_STEP
        assert max(sizes) <= lmdb_pages._ZEROS_SIZE < lmdb_pages.TAIL_STEP  # one reused buffer

    def test_a_failing_allocation_is_tried_again_at_the_next_txn(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A full disk leaves the tail uncovered (not remembered as covered) and fails nothing."""
        data = tmp_path / "data.mdb"
        data.write_bytes(b"\0" * 4096)
        tail = TailCover(str(data), 4096)
        tail.ahead = True
        tries: list[int] = []

        def full(fd: int, data: bytes, offset: int) -> int:
            tries.append(len(data))
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "pwrite", full)
        tail.cover(3)
        tail.cover(3)
        assert len(tries) == 2 and tail.covered == 0 and data.stat().st_size == 4096
        tail.close()

    def test_a_store_holds_one_tail_descriptor_and_closes_it(self, tmp_path: Path) -> None:
        """Writes reuse one descriptor; closing the store closes it."""
        store = open_store(tmp_path / "s", durability="none")
        rec = store.recorder("r")
        rec.checkpoint(0, {"a": "x"})
        tail = store.backend.env._tail
        fd = tail.fd
        assert fd is not None
        for i in range(1, 50):
            rec.checkpoint(i, {"a": os.urandom(3000)})
        assert tail.fd == fd
        store.close()
        assert tail.fd is None
        with pytest.raises(OSError):
            os.fstat(fd)


# -- a writer extending its head beside processes that sweep -------------------


def _shared(i: int) -> str:
    return f"shared-{i % 3}"


def _writer(path: str, seconds: float, out: Any) -> None:
    checked = 0
    real = commit_module.objects_to_check

    def counting(named: Any, written: Any, **kw: Any) -> list[bytes]:
        nonlocal checked
        got = real(named, written, **kw)
        checked += len(got)
        return got

    import cpstore.store.recorder as recorder_module  # noqa: PLC0415 - patched in this child

    recorder_module.objects_to_check = counting  # type: ignore[attr-defined]
    with open_store(path) as store:
        rec = store.recorder("w")
        deadline, i = time.monotonic() + seconds, 0
        keep = {"fixed": "f" * 500, "shared": _shared(0)}
        while time.monotonic() < deadline:
            if i % 5 == 0:
                keep["shared"] = _shared(i // 5)  # values other runs store and lose too
            if i % 9 == 4:
                rec.observe(i, "src", b"obs-%d" % (i % 2), pinned_at=1.0)
            state = {**keep, "n": i}
            out.put((rec.checkpoint(i, state), state))
            i += 1
    out.put(("checked", checked))
    out.put(None)


def _sweeper(path: str, seconds: float) -> None:
    with open_store(path) as store:
        deadline, i = time.monotonic() + seconds, 0
        while time.monotonic() < deadline:
            other = store.recorder(f"other{i}")
            for j in range(3):
                other.checkpoint(j, {"shared": _shared(j), "fixed": "f" * 500})
            if i % 2:
                store.delete_run(f"other{i}")
            else:
                store.prune(keep_last=1)
            i += 1
            time.sleep(0.05)


class TestSweepBesideAWriter:
    def test_sweeps_in_other_processes_never_leave_a_checkpoint_naming_a_missing_object(
        self, tmp_path: Path
    ) -> None:
        """prune/delete_run racing a head-extending writer: every stored checkpoint is whole."""
        path = str(tmp_path / "s")
        open_store(path).close()
        ctx = multiprocessing.get_context("spawn")
        out = ctx.Queue()
        writer = ctx.Process(target=_writer, args=(path, 8.0, out))
        sweeper = ctx.Process(target=_sweeper, args=(path, 8.0))
        writer.start()
        sweeper.start()
        acked: list[tuple[str, dict[str, Any]]] = []
        checked = 0
        while (item := out.get(timeout=120)) is not None:
            if item[0] == "checked":
                checked = item[1]
            else:
                acked.append(item)
        writer.join(60)
        sweeper.join(60)
        assert writer.exitcode == 0 and sweeper.exitcode == 0
        assert len(acked) > 10 and checked > 0  # the commit txns read what they did not write
        with open_store(path) as store:
            assert store.ref("w") == acked[-1][0]
            stored = 0
            for cid, state in acked:
                try:
                    with store.read(cid) as cp:
                        assert cp.state() == state
                    stored += 1
                except NotFoundError as exc:
                    assert exc.what == "checkpoint was pruned", exc
            assert stored >= 1
            report = store.verify()
            assert report.ok, report.problems
            with store.backend.read_txn() as txn:
                for _, value in raw_items(txn, store.backend.dbs, "checkpoints"):
                    manifest = decode_value(unpack_checkpoint_value(value)[1])
                    for _, key in manifest_references(manifest):
                        assert objects_of(store.backend.dbs).exists(txn, key)
