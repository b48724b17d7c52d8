"""review80: sealed values are compared by the bytes under the cipher, not by a decode.

lgsub80 compared a value an ``EncryptedSerializer`` sealed by decoding it with the
diff's serde and writing it again with the plain JsonPlusSerializer. A decode that
loses what the value is makes other values equal: a JsonPlusSerializer that may not
rebuild a class (``LANGGRAPH_STRICT_MSGPACK``, ``allowed_msgpack_modules=None``, or
a diff run where the class does not import) gives back its fields, so a dataclass
``Item(name="x")`` on A and the dict ``{"name": "x"}`` on B were "same values" while
the resumes (with the saver's serde) saw an ``Item`` and a ``dict``. Given an
``EncryptedSerializer``, the diff now opens the cipher and compares the inner
serde's bytes, as it compares plain values (the inner serde must still load them: a
wrong key that decrypts without raising is ``undecidable``). Both engines."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import START, StateGraph
from lg_cipher import NonceCipher
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


@dataclass
class Item:
    name: str


def _serde(*, strict: bool = False, key: bytes = b"k" * 32, tagless: bool = False) -> Any:
    inner = JsonPlusSerializer(allowed_msgpack_modules=None) if strict else JsonPlusSerializer()
    return EncryptedSerializer(NonceCipher(key, tagless=tagless), inner)


class _S(TypedDict):
    log: Annotated[list[str], operator.add]
    item: Any


def _cfg(thread: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}


def _graph(saver: CpstoreSaver) -> Any:
    def make(state: _S, config: RunnableConfig) -> dict[str, Any]:
        thread = config["configurable"]["thread_id"]
        return {"item": Item("x") if thread in "ac" else {"name": "x"}}

    def use(state: _S) -> dict[str, Any]:
        return {"log": [type(state["item"]).__name__]}

    g = StateGraph(_S)
    g.add_node("make", make)
    g.add_node("use", use)
    g.add_edge(START, "make")
    g.add_edge("make", "use")
    return g.compile(checkpointer=saver, interrupt_before=["use"])


def test_a_class_and_its_fields_differ_under_a_serde_that_cannot_rebuild_it(url: str) -> None:
    with CpstoreSaver.from_conn_string(url, serde=_serde()) as saver:
        graph = _graph(saver)
        for t in "abc":
            graph.invoke({"log": ["in"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"), serde=_serde(strict=True))
        # before: "same values at all 3 checkpoints" (both decoded to {"name": "x"})
        assert not diff.same and not diff.undecidable, diff.summary
        assert diff.channels == ("item",) and diff.nodes == ("make",), diff.summary
        assert diff_threads(saver.store, _cfg("a"), _cfg("c"), serde=_serde(strict=True)).same
        got = [graph.invoke(None, _cfg(t))["log"] for t in "ab"]
        assert got == [["in", "Item"], ["in", "dict"]]  # the resumes do differ


def test_a_plain_side_and_a_sealed_side_compare_by_the_inner_bytes(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as plain:
        _graph(plain).invoke({"log": ["in"]}, _cfg("b"))
        _graph(plain).invoke({"log": ["in"]}, _cfg("c"))
    with CpstoreSaver.from_conn_string(url, serde=_serde()) as saver:
        _graph(saver).invoke({"log": ["in"]}, _cfg("a"))
        strict = _serde(strict=True)
        diff = diff_threads(saver.store, _cfg("a"), _cfg("b"), serde=strict)
        assert not diff.same and diff.channels == ("item",), diff.summary
        assert diff_threads(saver.store, _cfg("a"), _cfg("c"), serde=strict).same


def test_a_wrong_key_that_decrypts_without_raising_is_undecidable(url: str) -> None:
    with CpstoreSaver.from_conn_string(url, serde=_serde(tagless=True)) as saver:
        graph = _graph(saver)
        for t in "ac":
            graph.invoke({"log": ["in"]}, _cfg(t))
        wrong = _serde(key=b"w" * 32, tagless=True)
        diff = diff_threads(saver.store, _cfg("a"), _cfg("c"), serde=wrong)
        assert not diff.same and diff.undecidable, diff.summary
