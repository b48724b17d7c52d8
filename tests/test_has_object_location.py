"""``Store.has_object`` follows the object's location as a read does (layout 5).

An index row whose heap entry is gone, or names another object's entry, is not
"stored": has_object names the damage (IntegrityError), as get_object does,
instead of answering True for bytes no read can serve.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from stored import damage

import cpstore
from cpstore.errors import IntegrityError
from cpstore.store.facade import Store


def _two(tmp_path: Path) -> tuple[Store, bytes, bytes]:
    st = cpstore.open(tmp_path / "s")
    return st, bytes(st.put_object(b"the object " * 30)), bytes(st.put_object(b"other " * 40))


def test_an_intact_object_is_stored_and_an_unknown_digest_is_not(tmp_path: Path) -> None:
    """The plain answers: True for a stored object, False for a digest never stored."""
    st, key, other = _two(tmp_path)
    with st:
        assert st.has_object(key) and st.has_object(other.hex())
        assert not st.has_object(bytes(16))


def test_a_location_naming_a_missing_heap_entry_is_named_not_answered_true(
    tmp_path: Path,
) -> None:
    """oloc row kept, heap entry gone: IntegrityError naming oloc/<key>."""
    st, key, _ = _two(tmp_path)
    with st:
        damage(st, lambda txn, dbs: txn.delete(bytes(txn.get(key, db=dbs["oloc"])), db=dbs["heap"]))
        with pytest.raises(IntegrityError, match="not stored") as info:
            st.has_object(key)
        assert f"oloc/{key.hex()}" in str(info.value.where)


def test_a_location_naming_another_objects_entry_is_named(tmp_path: Path) -> None:
    """oloc row pointing at another object's entry fails the kind-and-key compare."""
    st, key, other = _two(tmp_path)
    with st:

        def swap(txn: Any, dbs: Any) -> None:
            txn.put(key, bytes(txn.get(other, db=dbs["oloc"])), db=dbs["oloc"])

        damage(st, swap)
        with pytest.raises(IntegrityError, match="not the one the index names"):
            st.has_object(key)
        assert st.has_object(other)
