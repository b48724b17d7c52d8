"""Golden bytes of the LangGraph formats (docs/store.md, docs/langgraph.md)."""

from __future__ import annotations

import pytest
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from cpstore.errors import FormatVersionError, IntegrityError
from cpstore.langgraph._codec import (
    HEAD_KEY,
    HEAD_LAYOUT,
    branch_label,
    fork_branch,
    pack_head,
    pack_typed,
    pack_value,
    run_for,
    unpack_head,
)
from cpstore.langgraph._read import Entry
from cpstore.native.binding import digest
from cpstore.store.lg_index import checkpoint_key, pack, unpack, write_key

HISTORY = [f"{i:02d}" + "m" * 998 for i in range(40)]


def test_index_keys_are_pinned() -> None:
    """Entry and write keys: prefix, 2-byte-length fields, id last; write idx biased by 2^63."""
    assert checkpoint_key("t-1", "child:1", "1f0-abc").hex() == (
        "6c672f632f0003742d3100076368696c643a313166302d616263"
    )
    assert write_key("t-1", "", "1f0-abc", "task", -1).hex() == (
        "6c672f772f0003742d31000000073166302d61626300047461736b7fffffffffffffff"
    )


def test_an_index_entry_value_is_pinned() -> None:
    """An entry: msgpack of the body in its field order, then 8 check bytes."""
    key = checkpoint_key("t-1", "child:1", "1f0-abc")
    body = {
        "cp": bytes(range(16)),
        "run": "lg:t-1",
        "branch": "ns:child:1",
        "parent": None,
        "run_id": "r",
        "have": ["a"],
    }
    assert pack(key, body).hex() == (
        "86a26370c410000102030405060708090a0b0c0d0e0fa372756ea66c673a742d31a66272616e6368"
        "aa6e733a6368696c643a31a6706172656e74c0a672756e5f6964a172a46861766591a161a54f717b4a4b34fb"
    )


def test_a_value_part_and_a_list_are_pinned() -> None:
    """A part is type NUL bytes; a 40 KB list is a head and three segments cut at elements."""
    assert pack_typed(("msgpack", b"\x01\x02")).hex() == "6d73677061636b000102"
    parts = pack_value(JsonPlusSerializer(), "messages", HISTORY)
    assert sorted(parts) == [
        "channel/messages",
        "segment/messages/0",
        "segment/messages/1",
        "segment/messages/2",
    ]
    assert parts["channel/messages"].hex() == (
        "637073746f72652e6c69737400076d73677061636b03dc00280300000000000000bb9c000000000000"
    )
    assert [len(parts[f"segment/messages/{i}"]) for i in range(3)] == [17051, 17051, 6018]
    assert [digest(parts[f"segment/messages/{i}"]).hex() for i in range(3)] == [
        "3421cf12b533b5f916eea489efbda056",
        "7b2b8cb53352f5b136ce45c08c8211d9",
        "9594b12c31bbf552c09eaf19596f4ad5",
    ]


def test_run_and_branch_names_are_pinned() -> None:
    """Thread -> run, namespace -> branch, fork branch names (hashed when too long)."""
    assert run_for("chat-1") == "lg:chat-1"
    assert (branch_label(""), branch_label("a:b")) == ("main", "ns:a:b")
    assert (fork_branch("", "id1"), fork_branch("", "id1", 2)) == ("main@id1", "main@id1~2")


def test_hashed_names_are_pinned() -> None:
    """Hashed names, scheme 2: ``<prefix>b2:<BLAKE2b-256 hex of the UTF-8 name>`` (71,
    70 and 72 bytes, far inside a name's 200). Scheme 1 (XXH3-128, ``lg:#<32 hex>``:
    "x" * 300 was ``lg:#125237ea2ad7bc7aa5d1b4607dc83554``) is what older releases
    wrote; runs and branches of that form stay in use (tests/test_lg_hashed_names_compat.py)."""
    assert run_for("x" * 300) == (
        "lg:#b2:5aa7fbbf37986bb2a5d547c0d3c4d4326a24d786e7d57bf93fc784176e38b33d"
    )
    assert run_for("#1") == (
        "lg:#b2:34ee3f1112a381fdaaa6153c9e58326b2709eccddbe5a0248ba92eb53c4d673a"
    )
    label = "ns#b2:870fbdb429ab0a43d9842bd65df7a82f04f7f0d5bc1608e00e0affe2eae84e5e"
    assert branch_label("n" * 300) == label
    assert fork_branch("n" * 300, "id1") == label + "@id1"
    assert fork_branch("", "f" * 196) == (
        "fork#b2:8ff773f6276f8527d10454b9d3c6e4890f0fd4e49930f222cda848cb0df20fd8"
    )
    assert digest(("x" * 300).encode()).hex() == "125237ea2ad7bc7aa5d1b4607dc83554"


def _entry_value(body: dict[str, object]) -> tuple[bytes, bytes]:
    key = checkpoint_key("t-1", "", "1f0-abc")
    return key, pack(key, body)


_BODY: dict[str, object] = {
    "cp": bytes(range(16)),
    "run": "lg:t-1",
    "branch": "main",
    "parent": "1f0-ab9",
    "run_id": None,
    "have": ["a", "b"],
}


def test_an_entry_decodes_to_the_same_fields_on_the_typed_and_the_generic_path() -> None:
    """The typed decode of the common shape gives the fields the generic decode gives."""
    key, value = _entry_value(_BODY)
    typed = Entry.decode(key, value)
    body = unpack(key, value)
    assert typed == Entry(
        "t-1", "", "1f0-abc", body["cp"], body["run"], body["branch"],
        body["parent"], body["run_id"], tuple(body["have"]),
    )  # fmt: skip
    assert typed.have == ("a", "b") and type(typed.cid) is bytes


def test_an_entry_of_another_shape_takes_the_generic_path() -> None:
    """An extra field is not the typed shape: the generic decode still reads the entry."""
    key, value = _entry_value({**_BODY, "later": 1})
    assert Entry.decode(key, value).run == "lg:t-1"


def test_an_entry_missing_a_field_is_an_integrity_error() -> None:
    """A body without ``have`` fails the typed decode and the generic shape check."""
    body = dict(_BODY)
    del body["have"]
    key, value = _entry_value(body)
    with pytest.raises(IntegrityError, match="wrong shape"):
        Entry.decode(key, value)


def test_an_entry_failing_its_check_is_an_integrity_error_before_any_decode() -> None:
    """A flipped byte fails the check: refused, never decoded by the typed path."""
    key, value = _entry_value(_BODY)
    bad = bytearray(value)
    bad[5] ^= 1
    with pytest.raises(IntegrityError, match="fails its check"):
        Entry.decode(key, bytes(bad))


def test_a_layout_2_head_is_pinned() -> None:
    """A head: layout byte 2, the packed checkpoint's length (uint32 BE), both pairs."""
    ck, meta = pack_typed(("msgpack", b"\x81\xa1v\x04")), pack_typed(("json", b"{}"))
    head = pack_head(ck, meta)
    assert head.hex() == "020000000c6d73677061636b0081a17604" + "6a736f6e007b7d"
    assert unpack_head(head, "x") == (ck, meta)
    assert (HEAD_KEY, HEAD_LAYOUT) == ("lg", 2)


def test_a_head_of_an_unknown_layout_is_refused_by_name() -> None:
    """Another layout byte is FormatVersionError; a cut head or a non-bytes one IntegrityError."""
    head = pack_head(b"msgpack\x00\x01", b"msgpack\x00\x02")
    with pytest.raises(FormatVersionError, match="unknown LangGraph checkpoint layout"):
        unpack_head(b"\x03" + head[1:], "x")
    with pytest.raises(IntegrityError, match="cut short"):
        unpack_head(head[:7], "x")
    with pytest.raises(IntegrityError, match="malformed"):
        unpack_head("not bytes", "x")
