"""put86's put-path trims give the bytes and answers of the code they replace.

- ``encode_state`` of a parts state with nothing chunked is one ``%`` format of a
  template: the same bytes as ``encode_value`` of the state map, for any part names
  (``%`` in them included) and any 16-byte digests; any other shape takes the join.
- ``apply_writes`` asks ``Content.stored`` for a must-exist key the location reads did
  not answer (its ``exists`` closure is gone): an object deleted behind cpstore's back
  still refuses the commit, naming it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cpstore
from cpstore.errors import IntegrityError
from cpstore.native.canonical import encode_value
from cpstore.store import manifest_encode
from cpstore.store.content import objects_of
from cpstore.store.manifest_encode import encode_digest_map, encode_state

_digest = st.binary(min_size=16, max_size=16)


@settings(max_examples=300, deadline=None)
@given(
    parts=st.dictionaries(
        st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=10),
        _digest,
        max_size=12,
    ),
    digest=_digest,
)
def test_the_parts_state_template_is_encode_value(parts: dict[str, bytes], digest: bytes) -> None:
    state = {"kind": "parts", "digest": digest, "parts": parts, "chunked": {}}
    got = encode_state(state, encode_digest_map(parts))
    assert got == encode_value(state)
    assert b"%" not in manifest_encode._PARTS_STATE.replace(b"%b", b"")


def test_the_template_holds_the_fixed_bytes_of_the_join() -> None:
    digest = bytes(range(16))
    parts = {"a%b": b"\x25" * 16, "%": bytes(16)}
    state = {"kind": "parts", "digest": digest, "parts": parts, "chunked": {}}
    parts_bytes = encode_digest_map(parts)
    fast = encode_state(state, parts_bytes)
    assert fast == encode_value(state)
    # The same state through the join (a chunked map then removed from the bytes'
    # comparison is not possible: compare with encode_value, and the join on a shape
    # the template does not take).
    chunked = {"a%b": bytes(16)}
    other = {"kind": "parts", "digest": digest, "parts": parts, "chunked": chunked}
    assert encode_state(other, parts_bytes) == encode_value(other)


@pytest.mark.parametrize(
    "state",
    [
        {"kind": "bytes", "digest": bytes(16), "parts": {}, "chunked": {}},
        {"kind": "bytes", "digest": bytes(16), "parts": {}, "chunked": {"bytes": bytes(16)}},
        {
            "kind": "parts",
            "digest": bytes(16),
            "parts": {"a": bytes(16)},
            "chunked": {"a": b"x" * 16},
        },
        {"kind": "parts", "digest": None, "parts": {"a": bytes(16)}, "chunked": {}},
    ],
)
def test_other_shapes_take_the_join(state: dict[str, Any]) -> None:
    assert encode_state(state, encode_value(state["parts"])) == encode_value(state)


def test_a_named_object_deleted_still_refuses_the_commit(tmp_path: Path) -> None:
    """The must-exist read of an object the location reads do not cover (a log object)
    goes through Content.stored now that apply_writes passes no exists closure."""
    with cpstore.open(tmp_path / "s", durability="none") as store:
        rec = store.recorder("r")
        rec.observe(0, "src", b"payload", pinned_at=None)
        rec.checkpoint(0, {"a": "x"})
        key = next(iter(rec._confirmed - set(rec._order)))  # the observation log's object
        env = store.backend.env

        def drop(txn: Any) -> None:
            assert objects_of(env.dbs).delete(txn, key)

        env.write(drop)
        with pytest.raises(IntegrityError, match="not stored"):
            rec.checkpoint(1, {"a": "y"})  # names the log again without writing it
