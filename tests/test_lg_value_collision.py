"""Channel values a caller crafts to collide (XXH3-128) are refused, never misread.

Objects are named by XXH3-128 (docs/security.md, "What a digest proves"): a caller
who chooses channel values can build two values of one digest (``lg_collide.A``/``B``
minus a 14-byte prefix: the framing a value is stored with keeps the stripes aligned).
The second put is an IntegrityError naming the digest; the first value stays, read
back whole; the refused checkpoint does not exist; the store verifies. Found by the
b2run study (both backends).
"""

from __future__ import annotations

import pytest
from lg_collide import A, B, conf, put_at
from pg_cluster import backend_store, pg_cluster  # noqa: F401 - fixtures

from cpstore.errors import IntegrityError
from cpstore.langgraph import CpstoreSaver
from cpstore.native.binding import digest
from cpstore.store import Store


def test_a_crafted_colliding_value_is_refused_and_the_first_stays_whole(store: Store) -> None:
    """t1 stores one value of a colliding pair; t2's put of the other is refused."""
    saver = CpstoreSaver(store)
    first, second = A[14:], B[14:]
    assert first != second
    put_at(saver, "t1", None, "01", first)
    with pytest.raises(IntegrityError) as info:
        put_at(saver, "t2", None, "01", second)
    assert "different bytes are stored under this digest" in info.value.what
    got = saver.get_tuple(conf("t1"))
    assert got is not None and got.checkpoint["channel_values"]["x"] == first
    assert saver.get_tuple(conf("t2")) is None
    assert store.verify().ok


def test_the_raw_pair_collides_under_xxh3() -> None:
    """The premise: the raw strings collide under XXH3-128 and differ."""
    assert A != B and digest(A.encode()) == digest(B.encode())
