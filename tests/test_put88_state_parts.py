"""put88: a recorder's state whose part names are the last checkpoint's (the same name
objects, in the same order, in a plain dict) encodes only the parts whose value object
changed (``Recorder._same_names``); every other state takes the per-part loop. Both give
the same checkpoint ids, stored objects and part cache, for any sequence of states:
values kept, replaced, mutated in place (a list: never reused), big enough to be chunked,
AppendLogs grown, names added, dropped, reordered or given as equal but new objects.
"""

from __future__ import annotations

import operator
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import cpstore
from cpstore.errors import CanonicalEncodingError
from cpstore.native.append_log import AppendLog
from cpstore.store import recorder as recorder_module
from cpstore.store.chunk_tree import TREE_THRESHOLD
from cpstore.store.content import objects_of

_NAMES = ("alpha", "beta", "gamma", "delta")

_op = st.one_of(
    st.tuples(st.just("set"), st.integers(0, 3), st.integers(0, 5), st.integers(0, 9)),
    st.tuples(st.just("drop"), st.integers(0, 3)),
    st.tuples(st.just("mutate"), st.integers(0, 9)),
    st.tuples(st.just("grow"), st.integers(0, 9)),
    st.just(("reorder",)),
    st.just(("new_names",)),
    st.just(("same",)),
)


def _value(kind: int, n: int, shared: list[Any], log: AppendLog) -> Any:
    if kind == 0:
        return f"text {n}" * (n + 1)
    if kind == 1:
        return bytes([n]) * (n + 3)
    if kind == 2:
        return shared  # a mutable value: the same object, its contents changed by "mutate"
    if kind == 3:
        return "x" * (TREE_THRESHOLD + 10 * n)  # chunked
    if kind == 4:
        return log
    return {"n": n, "l": [n, str(n)]}


def _states(ops: list[tuple[Any, ...]]) -> Iterator[dict[str, Any]]:
    """The states a runtime would pass, step by step (the same value objects when kept;
    made as it records: a list or AppendLog changes between two checkpoints)."""
    shared: list[Any] = [0]
    log = AppendLog(["start"])
    state: dict[str, Any] = {"alpha": "a0", "beta": b"b0"}
    for op in ops:
        if op[0] == "set":
            state[_NAMES[op[1]]] = _value(op[2], op[3], shared, log)
        elif op[0] == "drop" and len(state) > 1:
            state.pop(_NAMES[op[1]], None)
        elif op[0] == "mutate":
            shared.append(op[1])
        elif op[0] == "grow":
            log.append(op[1])
        elif op[0] == "reorder":
            state = dict(reversed(state.items()))
        elif op[0] == "new_names":  # equal names, other str objects
            state = {"".join(list(k)): v for k, v in state.items()}
        yield dict(state)


@contextmanager
def _store() -> Iterator[cpstore.Store]:
    with tempfile.TemporaryDirectory() as root:
        store = cpstore.open(Path(root) / "s", durability="none")
        try:
            yield store
        finally:
            store.close()


def _record(ops: list[tuple[Any, ...]], *, proxy: bool) -> tuple[list[str], list[Any]]:
    """Checkpoint ids, and every stored object's bytes, recording ``_states(ops)``; ``proxy``
    passes each through a read-only mapping (not a dict: the per-part loop every step).
    Without it, a step whose names are the last step's takes ``_same_names``."""
    real = recorder_module.Recorder._same_names
    fast: list[int] = []

    def spy(self: Any, *args: Any) -> Any:
        fast.append(1)
        return real(self, *args)

    with _store() as store, pytest.MonkeyPatch.context() as mp:
        mp.setattr(recorder_module.Recorder, "_same_names", spy)
        rec = store.recorder("run", branch="main")
        ids, caches = [], []
        names: tuple[str, ...] = ()
        for step, state in enumerate(_states(ops)):
            same = step > 0 and len(names) == len(state) and all(map(operator.is_, names, state))
            taken = len(fast)
            ids.append(rec.checkpoint(step, MappingProxyType(state) if proxy else state))
            assert len(fast) - taken == (same and not proxy)
            names = tuple(state)
            kept = rec._parts
            caches.append((kept.names, kept.parts, kept.chunked))
        txn = store.backend.env.env.begin(buffers=False)
        try:
            objects = sorted((k, bytes(v)) for k, v in objects_of(store.backend.dbs).items(txn))
        finally:
            txn.abort()
    return ids, [caches, objects]


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(_op, min_size=1, max_size=12))
def test_same_names_gives_the_loops_ids_objects_and_cache(ops: list[tuple[Any, ...]]) -> None:
    assert _record(ops, proxy=False) == _record(ops, proxy=True)


def test_same_names_encodes_only_the_changed_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    encoded: list[Any] = []
    real = recorder_module.encode_fast  # type: ignore[attr-defined]

    def counting(value: Any) -> bytes:
        encoded.append(value)
        return real(value)

    monkeypatch.setattr(recorder_module, "encode_fast", counting)
    shared = [1]
    with _store() as store:
        rec = store.recorder("run", branch="main")
        state = {"alpha": "a", "beta": b"b", "gamma": shared}
        rec.checkpoint(0, state)
        assert encoded == ["a", b"b", [1]]
        encoded.clear()
        state["beta"] = b"B"
        shared.append(2)
        rec.checkpoint(1, dict(state))
        # beta replaced; gamma (a list) encoded again as it now is; alpha kept
        assert encoded == [b"B", [1, 2]]


def test_a_refused_part_leaves_the_cache_as_it_was() -> None:
    with _store() as store:
        rec = store.recorder("run", branch="main")
        state: dict[str, Any] = {"alpha": "a", "beta": "b"}
        first = rec.checkpoint(0, state)
        before = rec._parts
        with pytest.raises(CanonicalEncodingError) as err:
            rec.checkpoint(1, {"alpha": "a2", "beta": object()})
        assert err.value.where is not None and err.value.where.startswith("state['beta']")
        assert rec._parts is before
        assert rec.head == first
        again = dict(state)
        again["alpha"] = "a3"
        second = rec.checkpoint(1, again)
        assert second != first
