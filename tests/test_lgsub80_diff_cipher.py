"""lgsub80: ``diff_threads`` on threads stored through an encrypting serde.

LangGraph's ``EncryptedSerializer`` seals each value with a random nonce (AES-EAX in
``from_pycryptodome_aes``; here a stand-in cipher of the same shape, as pycryptodome is
no dependency): equal values are different bytes, type ``<type>+<cipher>``. Before,
threads of equal values diverged "at step -1" (every digest differs), and without the
serde the diff raised IntegrityError (the metadata does not decode). Pinned now: given
the saver's serde, a sealed value or write that differs by its bytes is decoded on both
sides and compared as the plain JsonPlusSerializer writes it (equal values are the
same, other values diverge as before); without it (or with another key) the threads are
``undecidable``, never the same, and the summary says to pass the serde. Both engines.
"""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, StateGraph
from langgraph.types import Command, interrupt
from lg_cipher import NonceCipher
from lg_delta import Rare
from lg_delta import graph as delta_graph
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads
from cpstore.langgraph._codec import unpack_typed
from cpstore.langgraph._read import entry_at, load_parts


def _serde(key: bytes = b"k" * 32) -> EncryptedSerializer:
    return EncryptedSerializer(NonceCipher(key), JsonPlusSerializer())


class _S(TypedDict):
    log: Annotated[list[str], operator.add]


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _graph(saver: CpstoreSaver, *, values_by_thread: bool, pending_by_thread: bool) -> Any:
    """``step`` writes, then ``fast`` finishes beside ``asks``, which interrupts."""

    def step(state: _S, config: RunnableConfig) -> dict[str, Any]:
        said = config["configurable"]["thread_id"] if values_by_thread else "same"
        return {"log": ["step " + said]}

    def fast(state: _S, config: RunnableConfig) -> dict[str, Any]:
        said = config["configurable"]["thread_id"] if pending_by_thread else "same"
        return {"log": ["fast " + said]}

    def asks(state: _S) -> dict[str, Any]:
        return {"log": ["asked " + str(interrupt("ok?"))]}

    g = StateGraph(_S)
    g.add_node("step", step)
    g.add_node("fast", fast)
    g.add_node("asks", asks)
    g.add_edge(START, "step")
    g.add_edge("step", "fast")
    g.add_edge("step", "asks")
    return g.compile(checkpointer=saver)


def _run(saver: CpstoreSaver, *, values: bool = False, pending: bool = False) -> Any:
    """Threads a and b run to the interrupt (``values``/``pending``: writing their id)."""
    graph = _graph(saver, values_by_thread=values, pending_by_thread=pending)
    for t in ("a", "b"):
        graph.invoke({"log": ["in"]}, _cfg(t))
    return graph


def _every_part_sealed(saver: CpstoreSaver, thread: str) -> None:
    with saver.store.backend.read_txn() as txn:
        entry = entry_at(txn, saver.store.backend.db("meta"), thread, "", None)
        assert entry is not None
        kinds = {unpack_typed(p, n)[0] for n, p in load_parts(txn, saver.store, entry).items()}
    assert kinds and all(k.endswith("+xn") for k in kinds - {"empty"}), kinds


def test_equal_values_through_a_nonce_cipher_are_the_same_given_the_serde(url: str) -> None:
    with CpstoreSaver.from_conn_string(url, serde=_serde()) as saver:
        graph = _run(saver)
        _every_part_sealed(saver, "a")
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"), serde=_serde())
        # before: "diverge at step -1 (checkpoint 0 of each chain) ... wrote different ..."
        assert diff.same and not diff.undecidable, diff.summary
        got = [graph.invoke(Command(resume="ok"), _cfg(t))["log"] for t in ("a", "b")]
        assert got[0] == got[1]


def test_other_values_through_a_nonce_cipher_diverge_given_the_serde(url: str) -> None:
    with CpstoreSaver.from_conn_string(url, serde=_serde()) as saver:
        _run(saver, values=True)
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"), serde=_serde())
        assert not diff.same and not diff.undecidable and not diff.pending, diff.summary
        assert diff.channels == ("log",) and diff.nodes == ("step",), diff.summary
        assert diff.index == 2, diff.summary  # the checkpoint after step, not the input


def test_other_pending_writes_through_a_nonce_cipher_diverge_given_the_serde(url: str) -> None:
    with CpstoreSaver.from_conn_string(url, serde=_serde()) as saver:
        _run(saver, pending=True)
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"), serde=_serde())
        assert not diff.same and diff.pending and not diff.undecidable, diff.summary
        assert diff.channels == ("log",) and diff.nodes == ("fast",), diff.summary


@pytest.mark.parametrize("serde", [None, "other key"])
def test_without_the_serde_sealed_threads_are_undecidable(url: str, serde: Any) -> None:
    with CpstoreSaver.from_conn_string(url, serde=_serde()) as saver:
        _run(saver)
        given = None if serde is None else _serde(b"o" * 32)
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"), serde=given)
        # before: IntegrityError "a stored LangGraph value does not decode ..."
        assert not diff.same and diff.undecidable, diff.summary
        assert "+xn" in diff.summary and "serde" in diff.summary, diff.summary
        # a thread against itself: one chain, the same (review80; it was undecidable)
        assert diff_threads(saver.store, _cfg("a"), _cfg("a"), serde=given).same


def test_a_delta_channel_through_a_nonce_cipher(url: str) -> None:
    """A DeltaChannel between snapshots is compared by the writes to it at the parent:
    sealed writes are decoded too (equal writes from two threads are the same)."""
    with CpstoreSaver.from_conn_string(url, serde=_serde()) as saver:
        graph = delta_graph(saver, rare=True)
        for t in ("a", "b"):
            graph.invoke({"log": ["hi"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"), serde=_serde())
        assert diff.same and not diff.undecidable, diff.summary
        # other writes to it diverge there
        g = StateGraph(Rare)
        g.add_node("says", lambda s, config: {"log": [config["configurable"]["thread_id"]]})
        g.add_edge(START, "says")
        other = g.compile(checkpointer=saver)
        for t in ("c", "d"):
            other.invoke({"log": ["hi"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("c"), _cfg("d"), serde=_serde())
        assert not diff.same and not diff.undecidable and diff.channels == ("log",), diff.summary


def test_plain_and_sealed_threads_of_equal_values_are_the_same(url: str) -> None:
    """One thread written before the saver's serde encrypted, one after: the encrypting
    serde reads both (it passes a type without a cipher name through). A plain
    interrupt is re-dumped without its id by the plain serde, not sealed anew."""
    with CpstoreSaver.from_conn_string(url) as plain:
        sealed = CpstoreSaver(plain.store, serde=_serde())
        for saver, t in ((plain, "p"), (sealed, "s")):
            _graph(saver, values_by_thread=False, pending_by_thread=False).invoke(
                {"log": ["in"]}, _cfg(t)
            )
        for given in (_serde(), _serde()):
            diff = diff_threads(plain.store, _cfg("p"), _cfg("s"), serde=given)
            assert diff.same, diff.summary
        # plain threads, an encrypting serde given: interrupts stay comparable
        _graph(plain, values_by_thread=False, pending_by_thread=False).invoke(
            {"log": ["in"]}, _cfg("q")
        )
        assert diff_threads(plain.store, _cfg("p"), _cfg("q"), serde=_serde()).same


class _SplitSerde:
    """Metadata sealed with one key, everything else with another: a diff given the
    first reads every step but no value (a position it cannot tell)."""

    def __init__(self) -> None:
        self.meta = _serde(b"k" * 32)
        self.values = _serde(b"v" * 32)

    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        meta = isinstance(obj, dict) and "step" in obj and "source" in obj
        out: tuple[str, bytes] = (self.meta if meta else self.values).dumps_typed(obj)
        return out

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        try:
            return self.meta.loads_typed(data)
        except ValueError:
            return self.values.loads_typed(data)


def test_a_value_the_serde_cannot_decode_is_undecidable_and_named(url: str) -> None:
    with CpstoreSaver.from_conn_string(url, serde=_SplitSerde()) as saver:
        graph = _run(saver)
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"), serde=_serde())
        assert not diff.same and diff.undecidable and diff.index == 0, diff.summary
        assert diff.channels == ("__start__",) and "cannot tell at step -1" in diff.summary
        # a divergence past it is reported as found, the doubt noted
        graph.invoke(Command(resume="ok"), _cfg("a"))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"), serde=_serde())
        assert not diff.same and not diff.undecidable, diff.summary
        assert "only A goes on" in diff.summary and "may differ already" in diff.summary
        # the saver's own serde decodes every part: the same
        assert diff_threads(saver.store, _cfg("b"), _cfg("b"), serde=_SplitSerde()).same
