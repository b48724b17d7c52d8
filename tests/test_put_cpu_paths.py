"""The put path's cheaper forms (issue 12) answer exactly what the per-item forms answer.

``Content.locations`` checks its common case (16-byte keys, 8-byte seqs) on
concatenations; the commit reads back the ref this process wrote without
hashing it again; the recorder takes the digest map and its order from one
plan. Each is compared here with the form it replaces, on sound and damaged
stores.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stored import damage
from test_put2_audit import _parts_store

import cpstore
from cpstore.errors import ConflictError, IntegrityError
from cpstore.native.canonical import encode_value
from cpstore.store import content, refs
from cpstore.store.content import KIND_OBJECT, Content, entry_header, objects_of
from cpstore.store.facade import Store
from cpstore.store.manifest import (
    digest_map_and_order,
    digests_in_map_order,
    encode_digest_map,
)
from cpstore.store.model import ref_key


def _per_key(objects: Content, txn: Any, keys: list[bytes]) -> tuple[bytes, set[bytes]]:
    """The reference: the hint block without ``found`` (the per-key loop), and the keys
    whose location checks as :meth:`Content.stored` checks it (damage: not found)."""
    found: set[bytes] = set()
    for key in keys:
        try:
            if objects._located(txn, key) is not None:
                found.add(key)
        except IntegrityError:
            pass
    return objects.locations(txn, keys), found


def _check(st: Store, keys: list[bytes]) -> None:
    objects = objects_of(st.backend.dbs)
    txn = st.backend.env.env.begin(write=True, buffers=True)  # the commit's kind of txn
    try:
        found: set[bytes] = set()
        got = objects.locations(txn, keys, found)
        want, want_found = _per_key(objects, txn, keys)
    finally:
        txn.abort()
    assert got == want
    assert found == want_found


def test_locations_of_sound_parts_equal_the_per_key_answers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a sound store every part is found and each hint is its heap seq (the
    concatenated form answers: it is the one taken)."""
    st, keys, _ = _parts_store(tmp_path / "s")
    taken: list[int] = []
    plans = content._plans

    def counted(n: int) -> Any:
        taken.append(n)
        return plans(n)

    monkeypatch.setattr(content, "_plans", counted)
    with st:
        _check(st, keys)
        assert taken == [len(keys)]
        objects = objects_of(st.backend.dbs)
        with st.backend.read_txn() as txn:
            found: set[bytes] = set()
            hints = objects.locations(txn, keys, found)
            assert found == set(keys)
            seqs = [int.from_bytes(bytes(txn.get(k, None, objects.index)), "big") for k in keys]
        assert hints == len(keys).to_bytes(4, "big") + b"".join(s.to_bytes(4, "big") for s in seqs)


@pytest.mark.parametrize(
    "how",
    [
        "row names another part's entry",
        "row names a missing entry",
        "row is 7 bytes",
        "row is 9 bytes",
        "row past 2**32",
        "row deleted",
        "entry carries another kind",
        "entry cut to its header",
    ],
)
def test_locations_with_one_damaged_location_equal_the_per_key_answers(
    tmp_path: Path, how: str
) -> None:
    """One damaged index row or heap entry among ten: the same hints, and that key (only)
    not found, exactly as the per-key reads answer."""
    st, keys, _ = _parts_store(tmp_path / "s")
    with st:
        victim, other = keys[3], keys[7]

        def hurt(txn: Any, dbs: Any) -> None:
            oloc, heap = dbs["oloc"], dbs["heap"]
            seq = bytes(txn.get(victim, db=oloc))
            if how == "row names another part's entry":
                txn.put(victim, bytes(txn.get(other, db=oloc)), db=oloc)
            elif how == "row names a missing entry":
                txn.put(victim, (2**31).to_bytes(8, "big"), db=oloc)
            elif how == "row is 7 bytes":
                txn.put(victim, seq[1:], db=oloc)
            elif how == "row is 9 bytes":
                txn.put(victim, b"\x00" + seq, db=oloc)
            elif how == "row past 2**32":
                txn.put(victim, (2**33).to_bytes(8, "big"), db=oloc)
            elif how == "row deleted":
                txn.delete(victim, db=oloc)
            elif how == "entry carries another kind":
                entry = bytes(txn.get(seq, db=heap))
                txn.put(seq, b"c" + entry[1:], db=heap)
            else:
                txn.put(seq, entry_header(KIND_OBJECT, victim), db=heap)

        damage(st, hurt)
        _check(st, keys)
        objects = objects_of(st.backend.dbs)
        with st.backend.read_txn() as txn:
            found: set[bytes] = set()
            objects.locations(txn, keys, found)
        # A header-only entry still carries its kind and key: found (its hash fails on read).
        assert found == (set(keys) if how == "entry cut to its header" else set(keys) - {victim})


def test_locations_of_keys_of_other_lengths_equal_the_per_key_answers(tmp_path: Path) -> None:
    """Keys that are not 16 bytes (a frame key, a short one) take the per-key reads: same
    answers, never a match made across key boundaries."""
    st, keys, _ = _parts_store(tmp_path / "s")
    with st:
        # 15 + 17 bytes sum to two 16-byte keys: a concatenation must not pair them up.
        _check(st, [keys[0][:15], keys[1] + b"\x00", *keys[2:]])
        _check(st, [*keys, b"\x01" * 17])
        _check(st, [])


@settings(max_examples=30, deadline=None)
@given(
    names=st.lists(
        st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=6),
        min_size=0,
        max_size=12,
        unique=True,
    ),
    seed=st.integers(0, 2**32),
)
def test_digest_map_and_order_equals_its_two_separate_encoders(names: list[str], seed: int) -> None:
    """One plan lookup gives encode_digest_map's bytes and digests_in_map_order's tuple,
    and those bytes are encode_value's."""
    rnd = random.Random(seed)
    mapping = {n: rnd.randbytes(16) for n in names}
    body, order = digest_map_and_order(mapping)
    assert body == encode_digest_map(mapping) == encode_value(mapping)
    assert order == digests_in_map_order(mapping)


@pytest.mark.parametrize(
    "names",
    [
        ["%"],
        ["%b", "%%", "a%sb", "%d", "x"],
        [f"%{i}" for i in range(40)],  # a map16 header, many escapes
        ["\x25" * 300, "%b%b"],  # a str8/str16 name made of "%"
    ],
)
def test_digest_map_and_order_writes_names_holding_percent_signs_as_they_are(
    names: list[str],
) -> None:
    """Names (and digests) holding "%" bytes come out byte for byte as encode_value's:
    the format template escapes every "%" that is not a digest's slot."""
    for digest in (b"%" * 16, b"%b" * 8, bytes(range(16))):
        mapping = {n: digest for n in names}
        body, order = digest_map_and_order(mapping)
        assert body == encode_digest_map(mapping) == encode_value(mapping)
        assert order == digests_in_map_order(mapping)


def test_a_ref_damaged_after_this_process_wrote_it_is_still_refused(tmp_path: Path) -> None:
    """The ref this process wrote is not hashed again when read back bytes-equal; any other
    bytes (its check flipped behind the store's back) are checked and refused."""
    with cpstore.open(tmp_path / "s") as st:
        rec = st.recorder("r")
        rec.checkpoint(0, {"a": "x"})
        key = ref_key("r", "main")
        written = refs._WRITTEN[0]
        assert written is not None and written[0] == key

        def flip(txn: Any, dbs: Any) -> None:
            value = bytearray(txn.get(key, db=dbs["refs"]))
            value[-1] ^= 1
            txn.put(key, bytes(value), db=dbs["refs"])

        damage(st, flip)
        with pytest.raises(IntegrityError):
            rec.checkpoint(1, {"a": "y"})


def test_a_ref_moved_by_another_process_to_other_bytes_is_read_and_checked(
    tmp_path: Path,
) -> None:
    """A ref another writer moved (other bytes than this process's last write) takes the
    full read: the recorder's commit is refused as a moved branch."""
    with cpstore.open(tmp_path / "s") as st:
        rec = st.recorder("r")
        first = rec.checkpoint(0, {"a": "x"})
        rec.checkpoint(1, {"a": "y"})
        # Another writer's ref value, written as pack_ref writes it (not through write_ref).
        damage(
            st,
            lambda txn, dbs: txn.put(
                ref_key("r", "main"),
                refs.pack_ref(ref_key("r", "main"), bytes.fromhex(first), refs.RECORDED),
                db=dbs["refs"],
            ),
        )
        with pytest.raises((ConflictError, IntegrityError)):
            rec.checkpoint(2, {"a": "z"})
        report = st.verify()
        assert not report.ok  # the table digest no longer matches the smuggled ref
