"""Stored offsets are little-endian on every host: a big-endian host converts them.

The token log's ``offsets`` object is ``count + 1`` uint64 little-endian values
(docs/store.md). The replay cursor and verify hand them to ``digest_batch``;
on a big-endian host, reading them in native order gives byte-swapped offsets.
These tests run the big-endian path on this machine: ``big_endian_host`` sets
``cpstore.native.args.HOST_BYTE_ORDER`` to ``"big"`` and makes ``array.frombytes``
in ``cpstore.native.args`` byte-swap, which is exactly what native-order reading of
little-endian bytes does on a big-endian host.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import cpstore
from cpstore.errors import InvalidInputError
from cpstore.native import args as _args
from cpstore.native import reference
from cpstore.replay.cursor import ReplayCursor
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store

#: Values spanning several 4096-token cursor blocks, of several encoded sizes.
VALUES: list[Any] = [i * 7919 if i % 3 else f"v{i}" * (i % 5) for i in range(9000)]


class _BigEndianHostArray(array):  # type: ignore[type-arg]
    """An ``array`` whose ``frombytes`` reads uint64s as a big-endian host would."""

    def frombytes(self, data: Any) -> None:
        super().frombytes(data)
        self.byteswap()


@pytest.fixture
def big_endian_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Run cpstore's byte-order decisions as on a big-endian host."""
    monkeypatch.setattr(_args, "HOST_BYTE_ORDER", "big", raising=False)
    monkeypatch.setattr(_args, "array", _BigEndianHostArray)
    yield


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "s") as st:
        yield st


def _record(store: Store) -> str:
    rec = store.recorder("r")
    rec.tokens([("rng", v) for v in VALUES])
    return rec.checkpoint(1, {"x": 1})


def _stored_values_and_offsets(store: Store, cid: str) -> tuple[bytes, bytes]:
    with store.read(cid) as cp:
        values, offsets = cp.token_values()
        return bytes(values), bytes(offsets)


def _replay_and_verify(store: Store, cid: str) -> tuple[list[Any], Any, Any]:
    with store.read(cid) as cp:
        cursor = ReplayCursor.from_checkpoint(cp)
        resolved = [cursor.resolve("rng") for _ in VALUES]
        cursor.assert_fully_consumed()
    return resolved, store.verify_checkpoint(cid), store.verify().ok


class TestBigEndianHost:
    def test_the_simulated_host_really_misreads_native_order(self, big_endian_host: None) -> None:
        """The fixture is a faithful big-endian host: native-order reads come out byte-swapped."""
        offs = _args.as_offsets(struct.pack("<2Q", 0, 5))
        assert list(offs) == [0, 5 << 56]

    def test_a_big_endian_host_replays_and_verifies_as_a_little_endian_one(
        self, store: Store, big_endian_host: None
    ) -> None:
        """Cursor values, verify_checkpoint and verify are identical on the big-endian path."""
        cid = _record(store)
        resolved, problems, ok = _replay_and_verify(store, cid)
        assert resolved == VALUES
        assert problems == ()
        assert ok

    def test_both_hosts_give_the_same_results(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The same store replays and verifies the same with and without the big-endian path."""
        cid = _record(store)
        little = _replay_and_verify(store, cid)
        with monkeypatch.context() as m:
            m.setattr(_args, "HOST_BYTE_ORDER", "big", raising=False)
            m.setattr(_args, "array", _BigEndianHostArray)
            big = _replay_and_verify(store, cid)
        assert big == little

    def test_stored_offsets_digest_the_same_on_both_paths_native_and_reference(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """digest_batch(values, stored, byteorder="little") is byte-identical on both paths."""
        values, offsets = _stored_values_and_offsets(store, _record(store))
        ints = list(struct.unpack(f"<{len(offsets) // 8}Q", offsets))
        expected = reference.digest_batch(values, ints)
        assert cpstore.native.digest_batch(values, offsets, byteorder="little") == expected
        monkeypatch.setattr(_args, "HOST_BYTE_ORDER", "big", raising=False)
        monkeypatch.setattr(_args, "array", _BigEndianHostArray)
        assert cpstore.native.digest_batch(values, offsets, byteorder="little") == expected
        assert reference.digest_batch(values, offsets, byteorder="little") == expected
        out = bytearray(len(expected))
        written = cpstore.native.digest_batch_into(values, offsets, out, byteorder="little")
        assert written == len(VALUES)
        assert bytes(out) == expected

    def test_stored_offsets_read_without_conversion_are_caught(
        self, store: Store, big_endian_host: None
    ) -> None:
        """Byte-swapped offsets (native order on a big-endian host) are refused, never hashed."""
        values, offsets = _stored_values_and_offsets(store, _record(store))
        for batch in (cpstore.native.digest_batch, reference.digest_batch):
            with pytest.raises(InvalidInputError, match="offsets"):
                batch(values, offsets)  # native order: the bug this file pins


def test_an_unknown_byte_order_is_refused() -> None:
    """byteorder must be native, little or big."""
    for batch in (cpstore.native.digest_batch, reference.digest_batch):
        with pytest.raises(InvalidInputError, match="byte order"):
            batch(b"ab", bytes(16), byteorder="middle")  # type: ignore[arg-type]


def _record_and_continue(path: Path) -> tuple[str, str, tuple[Any, ...]]:
    with open_store(path) as st:
        first = _record(st)
        rec = st.recorder("r")  # reloads the stored offsets to continue the log
        rec.token("rng", 1)
        second = rec.checkpoint(2, {"x": 2})
        return first, second, st.verify_checkpoint(second)


def test_a_big_endian_host_writes_and_reloads_little_endian_offsets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recorded and continued on a (simulated) big-endian host: the same ids as little-endian."""
    little = _record_and_continue(tmp_path / "le")
    monkeypatch.setattr(_args, "HOST_BYTE_ORDER", "big", raising=False)
    monkeypatch.setattr(_args, "array", _BigEndianHostArray)
    big = _record_and_continue(tmp_path / "be")
    # The ids name the offsets object by digest: equal ids mean byte-identical offsets.
    assert big == little and big[2] == ()
