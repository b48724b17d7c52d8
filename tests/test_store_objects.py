"""Objects: write-once, verified reads, bad input, store version, read-only and full stores."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from stored import raw_put

from cpstore.errors import (
    FormatVersionError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    StoreFullError,
    StoreReadOnlyError,
)
from cpstore.native.binding import digest
from cpstore.native.canonical import encode_value
from cpstore.store import model
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "s") as st:
        yield st


def _poke(store: Store, db: str, key: bytes, value: bytes) -> None:
    """Write raw bytes behind the store's back (simulates corruption)."""
    with store.backend.env.env.begin(write=True) as txn:
        raw_put(txn, store.backend.dbs, db, key, value)


class TestWriteOnce:
    def test_put_returns_the_digest_and_get_returns_the_bytes(self, store: Store) -> None:
        """An object is keyed by its XXH3-128 digest and reads back unchanged."""
        key = store.put_object(b"payload")
        assert key == digest(b"payload")
        assert store.get_object(key) == b"payload"
        assert store.get_object(key.hex()) == b"payload"

    def test_identical_put_is_a_no_op(self, store: Store) -> None:
        """Putting the same bytes twice gives the same digest and one entry."""
        a = store.put_object(b"same")
        # Any bytes-like is accepted at run time; the signature says only bytes.
        b = store.put_object(bytearray(b"same"))  # type: ignore[arg-type]
        assert a == b
        assert store.verify().counts["objects"] == 1

    def test_different_bytes_under_an_existing_key_is_an_integrity_error(
        self, store: Store
    ) -> None:
        """A stored copy that differs from the new bytes is never overwritten."""
        key = store.put_object(b"original")
        _poke(store, "objects", key, b"tampered")
        with pytest.raises(IntegrityError) as info:
            store.put_object(b"original")
        assert info.value.expected == key.hex()
        assert store.get_object(key, verify=False) == b"tampered"


class TestVerifiedReads:
    def test_a_corrupt_object_fails_its_read(self, store: Store) -> None:
        """Reads re-hash by default and name the digest that failed."""
        key = store.put_object(b"good bytes")
        _poke(store, "objects", key, b"bad bytes!")
        with pytest.raises(IntegrityError) as info:
            store.get_object(key)
        assert info.value.expected == key.hex()
        assert info.value.got == digest(b"bad bytes!").hex()

    def test_verify_false_is_an_explicit_opt_out(self, store: Store) -> None:
        """verify=False hands back the stored bytes without re-hashing."""
        key = store.put_object(b"good bytes")
        _poke(store, "objects", key, b"bad bytes!")
        assert store.get_object(key, verify=False) == b"bad bytes!"

    def test_unknown_digest_is_not_found_and_a_key_error(self, store: Store) -> None:
        """A missing object raises NotFoundError, which callers may catch as KeyError."""
        with pytest.raises(NotFoundError):
            store.get_object("00" * 16)
        with pytest.raises(KeyError):
            store.get_object(bytes(16))
        assert not store.has_object(bytes(16))


class TestBadInput:
    @pytest.mark.parametrize("value", ["text", 12, None, [1, 2]])
    def test_non_bytes_objects_are_refused(self, store: Store, value: object) -> None:
        """Only bytes-like objects are stored; the error names the type."""
        with pytest.raises(InvalidInputError):
            store.put_object(value)  # type: ignore[arg-type]

    @pytest.mark.parametrize("bad", ["xyz", "0" * 31, "g" * 32, 5, b"short"])
    def test_malformed_digests_are_refused(self, store: Store, bad: object) -> None:
        """Digests are 16 raw bytes or 32 hex characters."""
        with pytest.raises(InvalidInputError):
            store.get_object(bad)  # type: ignore[arg-type]

    def test_oversize_objects_are_refused_not_truncated(
        self, store: Store, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """An object over the size limit raises before anything is written."""
        monkeypatch.setattr(model, "MAX_OBJECT_SIZE", 10)
        with pytest.raises(InvalidInputError) as info:
            store.put_object(b"x" * 11)
        assert "11 bytes" in str(info.value)
        assert store.verify().counts["objects"] == 0

    @pytest.mark.parametrize("mode", ["fast", "", None])
    def test_unknown_durability_is_refused(self, tmp_path: Path, mode: object) -> None:
        """Durability is "sync" or "batched"."""
        with pytest.raises(InvalidInputError):
            open_store(tmp_path / "x", durability=mode)  # type: ignore[arg-type]


class TestStoreVersion:
    def test_a_store_of_another_version_is_refused(self, tmp_path: Path) -> None:
        """The meta record's version is checked on open; nothing is misread."""
        with open_store(tmp_path / "s") as st:
            _poke(
                st,
                "meta",
                b"format",
                encode_value({"layout": "cpstore", "version": 99, "digest": "xxh3-128"}),
            )
        with pytest.raises(FormatVersionError) as info:
            open_store(tmp_path / "s")
        assert info.value.got["version"] == 99

    def test_reopening_keeps_the_data(self, tmp_path: Path) -> None:
        """A closed store opens again with its objects."""
        with open_store(tmp_path / "s") as st:
            key = st.put_object(b"kept")
        with open_store(tmp_path / "s") as st:
            assert st.get_object(key) == b"kept"


class TestReadOnlyAndFull:
    def test_writes_to_a_read_only_store_raise(self, tmp_path: Path) -> None:
        """A store opened read-only serves reads and refuses every write."""
        with open_store(tmp_path / "s") as st:
            key = st.put_object(b"kept")
        with open_store(tmp_path / "s", readonly=True) as ro:
            assert ro.get_object(key) == b"kept"
            with pytest.raises(StoreReadOnlyError):
                ro.put_object(b"new")
            with pytest.raises(StoreReadOnlyError):
                ro.recorder("r").checkpoint(0, b"s")

    def test_read_only_open_of_a_missing_store_is_not_found(self, tmp_path: Path) -> None:
        """Read-only never creates a store."""
        with pytest.raises(NotFoundError):
            open_store(tmp_path / "missing", readonly=True)

    def test_the_map_grows_by_itself(self, tmp_path: Path) -> None:
        """Writes larger than the initial map succeed after automatic growth."""
        with open_store(tmp_path / "s", map_size=1 << 20, max_map_size=1 << 26) as st:
            keys = [st.put_object(bytes([i]) * 300_000) for i in range(8)]
            assert all(len(st.get_object(k)) == 300_000 for k in keys)
            assert st.backend.env.env.info()["map_size"] > 1 << 20

    def test_a_full_store_raises_and_stays_usable(self, tmp_path: Path) -> None:
        """Past max_map_size a write raises StoreFullError and writes nothing."""
        with open_store(tmp_path / "s", map_size=1 << 20, max_map_size=1 << 21) as st:
            small = st.put_object(b"small")
            with pytest.raises(StoreFullError):
                st.put_object(b"x" * (4 << 20))
            assert st.get_object(small) == b"small"
            assert st.verify().ok
