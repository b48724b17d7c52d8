"""observe_many / effect_many are all or nothing: a refused item leaves the recorder untouched.

For random batches with one bad item at a random position, the batch raises the
error the single call raises for that item (its ``where`` naming ``items[i]``), and the
recorder's next checkpoint is the one a recorder that never saw the batch writes.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpstore.errors import CpstoreError, InvalidInputError
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.recorder import Recorder

PROPERTY = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_RUNS = itertools.count()

payloads = st.binary(max_size=6)  # small: payloads repeat, within a batch and across
reads = st.tuples(
    st.integers(0, 50),
    st.sampled_from(["cfg", "clock", "tool.search", "é-source"]),
    payloads,
    st.none() | st.floats(allow_nan=False, allow_infinity=False) | st.integers(0, 10),
)
effects = st.tuples(st.sampled_from(["db", "mail", "crm.update", "ü-target"]), payloads)
BAD_READS = [
    (-1, "cfg", b"x", None),
    (True, "cfg", b"x", None),
    (2**63, "cfg", b"x", None),
    (1.0, "cfg", b"x", None),
    (1, "", b"x", None),
    (1, "  ", b"x", None),
    (1, "\ud800", b"x", None),
    (1, 7, b"x", None),
    (1, "cfg", "text", None),
    (1, "cfg", 5, None),
    (1, "cfg", b"x", math.nan),
    (1, "cfg", b"x", math.inf),
    (1, "cfg", b"x", 10**400),  # beyond the float range
    (1, "cfg", b"x", True),
    (1, "cfg", b"x", "soon"),
    (1, "cfg", b"x"),  # shape
    [1, "cfg", b"x", None],  # shape
]
BAD_EFFECTS = [
    ("", b"x"),
    ("\t", b"x"),
    ("\udcff", b"x"),
    (None, b"x"),
    ("db", "text"),
    ("db", None),
    ("db",),  # shape
    ["db", b"x"],  # shape
]


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Two stores: one for the recorder that sees the bad batch, one for the one that does not."""
    base = tmp_path_factory.mktemp("bulk")
    with open_store(base / "a") as a, open_store(base / "b") as b:
        yield a, b


def _history(rec: Recorder, steps: list[Any]) -> None:
    for kind, item in steps:
        if kind == "read":
            rec.observe(item[0], item[1], item[2], pinned_at=item[3])
        elif kind == "effect":
            rec.effect(*item)
        elif kind == "token":
            rec.token("rng", item)
        else:
            rec.checkpoint(item, {"at": item})


histories = st.lists(
    st.tuples(st.just("read"), reads)
    | st.tuples(st.just("effect"), effects)
    | st.tuples(st.just("token"), st.integers(-5, 5))
    | st.tuples(st.just("checkpoint"), st.just(0)),
    max_size=6,
)


def _state(rec: Recorder) -> dict[str, Any]:
    """Everything a batch could touch, copied."""
    return {
        "tokens": bytes(rec._tokens),
        "values": bytes(rec._values),
        "observations": [list(o) for o in rec._observations],
        "effects": [list(e) for e in rec._effects],
        "pending": dict(rec._pending),
        "unlogged": list(rec._unlogged),
        "logged": set(rec._logged),
        "dirty": set(rec._dirty),
        "sealed": rec.ledger_sealed,
        "unsealed": rec.unsealed_effects,
        "count": rec.token_count,
    }


def _single_error(store: Store, call: str, bad: Any) -> CpstoreError:
    rec = store.recorder(f"scratch-{next(_RUNS)}")
    with pytest.raises(CpstoreError) as info:
        if call == "observe_many":
            step, source, payload, pinned_at = bad
            rec.observe(step, source, payload, pinned_at=pinned_at)
        else:
            rec.effect(*bad)
    rec.close(discard_effects=True)
    return info.value


@PROPERTY
@given(
    history=histories,
    call=st.sampled_from(["observe_many", "effect_many"]),
    good=st.data(),
    after=histories,
)
def test_a_batch_with_a_bad_item_leaves_the_recorder_as_if_never_called(
    stores: tuple[Store, Store],
    *,
    history: list[Any],
    call: str,
    good: st.DataObject,
    after: list[Any],
) -> None:
    """A refused batch: the single call's error naming the index; the next checkpoint unchanged."""
    a, b = stores
    run = f"run-{next(_RUNS)}"
    items: list[Any] = good.draw(st.lists(reads if call == "observe_many" else effects, max_size=8))
    bad = good.draw(st.sampled_from(BAD_READS if call == "observe_many" else BAD_EFFECTS))
    position = good.draw(st.integers(0, len(items)))
    items.insert(position, bad)
    saw, never = a.recorder(run), b.recorder(run)
    _history(saw, history)
    _history(never, history)
    before = _state(saw)
    with pytest.raises(CpstoreError) as info:
        getattr(saw, call)(items)
    assert _state(saw) == before
    got = info.value
    shape = not isinstance(bad, tuple) or len(bad) != (4 if call == "observe_many" else 2)
    if shape:
        assert isinstance(got, InvalidInputError) and got.where == f"items[{position}]"
    else:
        single = _single_error(a, call, bad)
        assert (type(got), got.what, got.expected, got.got) == (
            type(single), single.what, single.expected, single.got
        )  # fmt: skip
        # The single call's refusal names its own (scratch) run since meta80: this one's here.
        where = (
            None
            if single.where is None
            else re.sub(r"^run scratch-\d+ ", f"run {run} ", single.where)
        )
        assert got.where == f"items[{position}]" + ("" if where is None else f".{where}")
    _history(saw, after)
    _history(never, after)
    assert saw.checkpoint(99, {"end": True}) == never.checkpoint(99, {"end": True})


@PROPERTY
@given(history=histories, batch=st.lists(reads, max_size=8), fx=st.lists(effects, max_size=8))
def test_a_valid_batch_equals_the_loop_of_single_calls(
    stores: tuple[Store, Store], history: list[Any], batch: list[Any], fx: list[Any]
) -> None:
    """observe_many/effect_many give the checkpoint of one single call per item, and its seq."""
    a, b = stores
    run = f"run-{next(_RUNS)}"
    bulk, loop = a.recorder(run), b.recorder(run)
    _history(bulk, history)
    _history(loop, history)
    bulk.observe_many(batch)
    first = bulk.effect_many(fx)
    _history(loop, [("read", r) for r in batch])
    seqs = [loop.effect(*e) for e in fx]
    assert first == (seqs[0] if seqs else -1)
    assert _state(bulk) == _state(loop)
    assert bulk.checkpoint(99, {"end": True}) == loop.checkpoint(99, {"end": True})


def test_bytes_like_payloads_and_int_pins_are_taken_as_single_calls_take_them(
    stores: tuple[Store, Store],
) -> None:
    """bytearray / memoryview payloads, int and -0.0 pins: the loop's checkpoint, byte for byte."""
    a, b = stores
    run = f"run-{next(_RUNS)}"
    items: list[Any] = [(1, "cfg", bytearray(b"ab"), 3), (2, "cfg", memoryview(b"cd"), -0.0)]
    odd: Any = bytearray(b"e")
    bulk, loop = a.recorder(run), b.recorder(run)
    bulk.observe_many(items)
    bulk.effect_many([("db", odd)])
    for step, source, payload, pinned in items:
        loop.observe(step, source, payload, pinned_at=pinned)
    loop.effect("db", odd)
    assert bulk.checkpoint(1, b"s") == loop.checkpoint(1, b"s")


def test_an_interrupted_append_is_rolled_back(
    stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch
) -> None:
    """KeyboardInterrupt after the pending objects were added: the recorder is as before."""
    a, _ = stores
    rec = a.recorder(f"run-{next(_RUNS)}")
    rec.observe(0, "cfg", b"old", pinned_at=None)
    before = _state(rec)

    class Interrupting(list[bytes]):
        def extend(self, _: Any) -> None:
            raise KeyboardInterrupt

    monkeypatch.setattr(rec, "_unlogged", Interrupting(rec._unlogged))
    with pytest.raises(KeyboardInterrupt):
        rec.observe_many([(1, "cfg", b"new", None)])
    assert _state(rec) == before


class Read(NamedTuple):
    step: int
    source: str
    payload: bytes
    pinned_at: float | None


class Effect(NamedTuple):
    target: str
    payload: bytes


def test_named_tuple_items_are_taken_as_plain_tuples(stores: tuple[Store, Store]) -> None:
    """Tuple-subclass items (NamedTuple records) give the loop's checkpoint, as before."""
    a, b = stores
    run = f"run-{next(_RUNS)}"
    bulk, loop = a.recorder(run), b.recorder(run)
    bulk.observe_many([Read(1, "cfg", b"ab", 2.5), Read(2, "é-src", b"cd", None)])
    assert bulk.effect_many([Effect("db", b"x"), Effect("mail", b"y")]) == 0
    loop.observe(1, "cfg", b"ab", pinned_at=2.5)
    loop.observe(2, "é-src", b"cd", pinned_at=None)
    loop.effect("db", b"x")
    loop.effect("mail", b"y")
    assert _state(bulk) == _state(loop)
    assert bulk.checkpoint(1, b"s") == loop.checkpoint(1, b"s")
