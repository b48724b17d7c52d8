"""audit24: the lgread read paths (inline msgpack decode, single-use get_tuple Loader,
one writes seek per namespace in a list batch) against an oracle on every kind of serde.

Whatever the serde (the exact default, a subclass, another allowlist, a custom or
later replaced ext hook, an encrypted serde, replaced ``loads_typed`` or
``dumps_typed``, a ``with_allowlist`` copy), ``get_tuple``, ``list`` (per
namespace, across namespaces with a common prefix, with ``before``, ``limit``,
``filter``), ``aget_tuple`` and ``alist`` give the oracle's tuples
(``lg_audit24``), values of the same types, and a caller's changes never reach a
later read nor another tuple of the same read.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.base import CheckpointTuple, empty_checkpoint
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from lg_audit24 import (
    SERDES,
    Colour,
    Model,
    Point,
    _conf,
    _ext_marker,
    _mutate,
    _oracle_of,
    _Plain,
    _same_tuple,
)
from pg_cluster import (  # noqa: F401 - fixtures
    backend_url,
    pg_cluster,
    pg_url,
)

import cpstore.store as cpstore_store
from cpstore.langgraph import CpstoreSaver
from cpstore.store import Store

_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
    | st.datetimes(timezones=st.none() | st.just(datetime.UTC))
    | st.dates()
    | st.uuids()
    | st.decimals(allow_nan=False, allow_infinity=False, places=3)
    | st.sampled_from([Colour.RED, Point(1, [2, 3]), Model(name="n", tags=["a"])])
    | st.builds(HumanMessage, content=st.text(max_size=10), id=st.text(max_size=4))
)
_values = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.tuples(inner, inner)
        | st.dictionaries(st.text(max_size=6), inner, max_size=4)
        | st.frozensets(st.integers(-1000, 1000), max_size=4)
        | st.sets(st.text(max_size=4), max_size=4)
    ),
    max_leaves=12,
)
#: Steps of (namespace, channel values set at that step, writes put for it).
_steps = st.lists(
    st.tuples(
        st.sampled_from(["", "a", "a:b", "a\x00"]),
        st.dictionaries(st.sampled_from(["x", "y", "big"]), _values, min_size=1, max_size=2),
        st.lists(_values, max_size=2),
    ),
    min_size=1,
    max_size=5,
)


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    opened = cpstore_store.open(url)
    assert isinstance(opened, Store)
    yield opened
    opened.close()


def _put_steps(
    saver: CpstoreSaver, thread: str, steps: list[tuple[str, dict[str, Any], list[Any]]]
) -> list[dict[str, Any]]:
    """Put each step on its namespace (values carried over), with its writes; the configs."""
    values: dict[str, dict[str, Any]] = {}
    versions: dict[str, dict[str, int]] = {}
    last: dict[str, dict[str, Any]] = {}
    configs = []
    for step, (ns, changed, writes) in enumerate(steps):
        held, vers = values.setdefault(ns, {}), versions.setdefault(ns, {})
        for name, value in changed.items():
            # "big": a list long enough to be stored in segments (pack_value).
            held[name] = [value, *["p" * 100] * 200] if name == "big" else value
            vers[name] = vers.get(name, 0) + 1
        cp = empty_checkpoint()
        cp["channel_values"] = dict(held)
        cp["channel_versions"] = dict(vers)
        config = saver.put(
            last.get(ns, _conf(thread, ns)),
            cp,
            {"source": "loop", "step": step, "writes": {"n": [step]}},
            {k: vers[k] for k in changed},
        )
        last[ns] = config
        configs.append(config)
        if writes:
            saver.put_writes(config, [("w", v) for v in writes], f"task-{step}")
    return configs


def _check_reads(saver: CpstoreSaver, thread: str, configs: list[dict[str, Any]]) -> None:
    """Every read path against the oracle, each result mutated before the next read."""
    for config in configs:
        _same_tuple(saver.get_tuple(config), _oracle_of(saver, config))
        _same_tuple(asyncio.run(saver.aget_tuple(config)), _oracle_of(saver, config))
    for ns in {c["configurable"]["checkpoint_ns"] for c in configs}:
        latest = _conf(thread, ns)
        _same_tuple(saver.get_tuple(latest), _oracle_of(saver, latest))
    listed = list(saver.list(_conf(thread, None)))
    by_ns = sorted(configs, key=lambda c: c["configurable"]["checkpoint_ns"], reverse=True)
    assert [t.config for t in listed] == [
        c
        for ns in dict.fromkeys(c["configurable"]["checkpoint_ns"] for c in by_ns)
        for c in reversed([c for c in configs if c["configurable"]["checkpoint_ns"] == ns])
    ]
    for tup in listed:  # each changed before the next is compared: no tuple shares with another
        _same_tuple(tup, _oracle_of(saver, tup.config))
        _mutate(tup)
    listed = list(saver.list(_conf(thread, None)))

    async def alist(config: Any, **kw: Any) -> list[CheckpointTuple]:
        return [t async for t in saver.alist(config, **kw)]

    for tup in asyncio.run(alist(_conf(thread, None))):
        _same_tuple(tup, _oracle_of(saver, tup.config))
    for config in configs:
        ns = config["configurable"]["checkpoint_ns"]
        for kw in ({"before": config}, {"limit": 1}, {"filter": {"source": "loop"}}):
            got = list(saver.list(_conf(thread, ns), **kw))
            for tup in got:
                _same_tuple(tup, _oracle_of(saver, tup.config))
            if "before" in kw:
                cid = config["configurable"]["checkpoint_id"]
                assert all(t.config["configurable"]["checkpoint_id"] < cid for t in got)
        step = saver.get_tuple(config)
        assert step is not None
        got = list(saver.list(_conf(thread, ns), filter={"step": step.metadata["step"]}))
        assert [t.config for t in got] == [config]
        _mutate(got[0])
        _same_tuple(saver.get_tuple(config), _oracle_of(saver, config))
    for tup in listed:
        _mutate(tup)
    for tup in saver.list(_conf(thread, None)):
        _same_tuple(tup, _oracle_of(saver, tup.config))


_counter = iter(range(10**9))


@pytest.mark.parametrize("variant", list(SERDES))
@settings(
    max_examples=10,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # a failure is shown unshrunk
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=_steps)
def test_every_read_path_equals_the_serdes_own_loads_typed(
    variant: str, steps: list[tuple[str, dict[str, Any], list[Any]]]
) -> None:
    """Hypothesis values (ext types, models, sets, tuples, bytes, nested; a segmented
    list) on four namespaces with a common prefix: each serde's reads as its loads_typed."""
    make, later = SERDES[variant]
    with tempfile.TemporaryDirectory() as tmp:
        store = cpstore_store.open(str(Path(tmp) / "s"), durability="none")
        assert isinstance(store, Store)
        try:
            saver = CpstoreSaver(store, serde=make())
            thread = f"t{next(_counter)}"
            configs = _put_steps(saver, thread, steps)
            saver.get_tuple(configs[-1])  # the saver's loaders are built and kept
            if later is not None:
                later(saver.serde)
            _check_reads(saver, thread, configs)
        finally:
            store.close()


_FIXED: list[tuple[str, dict[str, Any], list[Any]]] = [
    ("", {"x": uuid.UUID(int=7), "y": [Point(1, [2]), {1, 2}]}, []),
    ("a", {"x": (decimal.Decimal("1.5"), b"raw"), "big": HumanMessage(content="m", id="1")}, []),
    ("", {"y": Model(name="n", tags=["t"])}, [datetime.datetime(2026, 1, 2)]),
    ("a:b", {"x": AIMessage(content="ai", id="2")}, [Colour.RED]),
    ("a", {"x": {"nested": [{"k": (1, 2)}]}}, [bytearray(b"ba")]),
]


@pytest.mark.parametrize("variant", list(SERDES))
def test_each_serde_reads_as_its_loads_typed_on_each_backend(store: Store, variant: str) -> None:
    """The same on PostgreSQL (fixed values: each serde, both backends)."""
    make, later = SERDES[variant]
    saver = CpstoreSaver(store, serde=make())
    configs = _put_steps(saver, "fixed", _FIXED)
    saver.get_tuple(configs[-1])
    if later is not None:
        later(saver.serde)
    _check_reads(saver, "fixed", configs)


def test_a_replaced_ext_hook_is_used_by_the_next_read(tmp_path: Path) -> None:
    """``serde._unpack_ext_hook`` replaced after a read built the saver's loaders: the
    next get_tuple and list decode ext types with the new hook, as loads_typed does.
    (Its own serde: without one a saver gets LangGraph's class-level default, which
    every other saver in the process shares.)"""
    serde = JsonPlusSerializer()
    with CpstoreSaver.from_conn_string(tmp_path / "s", serde=serde, durability="none") as saver:
        assert saver.serde is serde
        cp = empty_checkpoint()
        cp["channel_values"] = {"x": uuid.UUID(int=5)}
        cp["channel_versions"] = {"x": 1}
        config = saver.put(_conf("t", ""), cp, {"step": 0}, {"x": 1})
        saver.put_writes(config, [("x", uuid.UUID(int=6))], "task")
        first = saver.get_tuple(config)
        assert first is not None and first.checkpoint["channel_values"] == {"x": uuid.UUID(int=5)}
        saver.serde._unpack_ext_hook = _ext_marker
        want = saver.serde.loads_typed(saver.serde.dumps_typed(uuid.UUID(int=5)))
        assert want[0] == "ext"
        for got in (saver.get_tuple(config), next(iter(saver.list(_conf("t", ""))))):
            assert got is not None
            assert got.checkpoint["channel_values"] == {"x": want}
            assert got.pending_writes == [("task", "x", want)]


def test_a_with_allowlist_clone_reads_by_its_serde_and_the_original_by_its_own(
    tmp_path: Path,
) -> None:
    """``with_allowlist`` shallow-copies the saver (its kept loaders too) and gives the copy
    a derived serde: the copy decodes the allowed type, the original still refuses it."""
    strict = JsonPlusSerializer(allowed_msgpack_modules=None)
    with CpstoreSaver.from_conn_string(tmp_path / "s", serde=strict, durability="none") as saver:
        cp = empty_checkpoint()
        cp["channel_values"] = {"p": Point(1, [2])}
        cp["channel_versions"] = {"p": 1}
        config = saver.put(_conf("t", ""), cp, {"step": 0}, {"p": 1})
        saver.put_writes(config, [("p", Point(3, [4]))], "task")
        refused = saver.get_tuple(config)  # builds and keeps the strict loaders
        assert refused is not None and refused.checkpoint["channel_values"]["p"] == {
            "x": 1,
            "y": [2],
        }
        clone = saver.with_allowlist([(Point.__module__, "Point")])
        assert isinstance(clone, CpstoreSaver) and clone.serde is not strict
        for got in (clone.get_tuple(config), next(iter(clone.list(_conf("t", ""))))):
            assert got is not None
            _same_tuple(got, _oracle_of(clone, config))
            assert got.checkpoint["channel_values"]["p"] == Point(1, [2])
            assert got.pending_writes == [("task", "p", Point(3, [4]))]
        again = saver.get_tuple(config)
        _same_tuple(again, refused)
        # Another instance of one subclass (the same loads_typed function): its own
        # allowlist, not the kept loaders' instance's.
        saver.serde = _Plain(allowed_msgpack_modules=None)
        assert saver.get_tuple(config) is not None
        saver.serde = _Plain(allowed_msgpack_modules=[(Point.__module__, "Point")])
        got = saver.get_tuple(config)
        assert got is not None and got.checkpoint["channel_values"]["p"] == Point(1, [2])
