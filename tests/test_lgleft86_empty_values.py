"""lgleft86: a channel holding ``[]`` (or ``0``, ``{}``...) on one thread and never
written on the other.

A node that returns ``{"other": []}`` stores ``other`` as ``[]``; on a thread whose node
returned nothing it is absent. For a reducer channel (``Annotated[list, add]``, a
``BinaryOperatorAggregate``) LangGraph loads both as ``[]`` and the resumes ran the
same nodes with the same state, while ``diff_threads`` said "diverge at step 1 ...
wrote different other" (a false divergence). For a ``LastValue`` channel (``other:
list``) the same checkpoints resumed with ``other`` ``[]`` on one side and missing on the
other: the checkpoint does not say which channel it is, so both are undecidable (exit
11 in ``cpstore lg-diff``), never the same. Both engines."""

from __future__ import annotations

import operator
from typing import Annotated, Any, TypedDict

from langchain_core.runnables import RunnableConfig
from lg_threads import a_then_n, cfg, lg_diff
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_lgsub80_diff_cipher import _serde

from cpstore.langgraph import CpstoreSaver, diff_threads


class _Reduced(TypedDict):
    log: Annotated[list[str], operator.add]
    other: Annotated[list[str], operator.add]
    count: Annotated[int, operator.add]


class _Last(TypedDict, total=False):
    log: Annotated[list[str], operator.add]
    other: list[str]
    count: int


def _graph(saver: CpstoreSaver, state: Any) -> Any:
    """``a`` then ``n``, stopped before ``n``; on threads starting with ``x``, ``a``
    returns ``other`` ``[]`` and ``count`` ``0``, on ``z`` also a line of ``log``;
    ``n`` logs what it read."""

    def a(_: Any, config: RunnableConfig) -> dict[str, Any]:
        thread = config["configurable"]["thread_id"]
        if thread.startswith("x"):
            return {"other": [], "count": 0}
        return {"log": ["z"], "other": []} if thread.startswith("z") else {}

    def n(s: Any) -> dict[str, Any]:
        return {"log": [f"n read {s.get('other')!r} {s.get('count')!r}"]}

    return a_then_n(saver, a, n, state=state)


def _held(saver: CpstoreSaver, thread: str) -> dict[str, Any]:
    tup = saver.get_tuple(cfg(thread))
    assert tup is not None
    return dict(tup.checkpoint["channel_values"])


def test_a_reducer_s_starting_value_against_none_is_not_a_divergence(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver, _Reduced)
        for t in ("x", "y"):
            app.invoke({"log": ["in"]}, cfg(t))
        held = [_held(saver, t) for t in ("x", "y")]
        assert held[0]["other"] == [] and held[0]["count"] == 0
        assert "other" not in held[1] and "count" not in held[1]
        diff = diff_threads(saver.store, cfg("x"), cfg("y"))
        # before: "diverge at step 1 (checkpoint 2 of each chain): node ..., a wrote
        # different count, other", undecidable False
        assert not diff.same and diff.undecidable and diff.index == 2, diff.summary
        assert diff.channels == ("count", "other"), diff.summary
        assert "never written on the other" in diff.summary, diff.summary
        got = [app.invoke(None, cfg(t)) for t in ("x", "y")]
        want = {"log": ["in", "n read [] 0"], "other": [], "count": 0}
        assert got == [want, want]  # the resumes run alike


def test_a_last_value_s_empty_list_against_none_stays_short_of_the_same(url: str) -> None:
    """The same checkpoints from a LastValue channel: the resumes differ."""
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver, _Last)
        for t in ("x", "y"):
            app.invoke({"log": ["in"]}, cfg(t))
        diff = diff_threads(saver.store, cfg("x"), cfg("y"))
        assert not diff.same and diff.undecidable, diff.summary
        got = [app.invoke(None, cfg(t)) for t in ("x", "y")]
        assert got == [
            {"log": ["in", "n read [] 0"], "other": [], "count": 0},
            {"log": ["in", "n read None None"]},
        ]


def test_a_value_that_differs_beside_it_or_later_is_still_a_divergence(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver, _Reduced)
        for t in ("x", "y", "z"):
            app.invoke({"log": ["in"]}, cfg(t))
        diff = diff_threads(saver.store, cfg("z"), cfg("y"))  # log differs at the same step
        assert not diff.same and not diff.undecidable, diff.summary
        assert diff.channels == ("log",) and diff.index == 2, diff.summary
        for t, line in (("x", "p"), ("y", "q")):
            app.invoke(None, cfg(t))
            app.invoke({"log": [line]}, cfg(t))
        later = diff_threads(saver.store, cfg("x"), cfg("y"))
        assert not later.same and not later.undecidable, later.summary
        assert later.channels == ("__start__",) and later.index == 4, later.summary
        assert "checkpoint 2 may differ already (count, other:" in later.summary, later.summary


def test_a_sealed_starting_value_against_none_is_undecidable_with_or_without_the_serde(
    url: str,
) -> None:
    """Stored by an encrypting serde (a stand-in cipher with a random nonce): opened
    with the saver's serde it is the starting value; unopened it cannot be told."""
    with CpstoreSaver.from_conn_string(url, serde=_serde()) as saver:
        app = _graph(saver, _Reduced)
        for t in ("x", "y"):
            app.invoke({"log": ["in"]}, cfg(t))
        opened = diff_threads(saver.store, cfg("x"), cfg("y"), serde=saver.serde)
        # before: "diverge at step 1 ... wrote different count, other"
        assert not opened.same and opened.undecidable, opened.summary
        assert "never written on the other" in opened.summary, opened.summary
        unopened = diff_threads(saver.store, cfg("x"), cfg("y"))
        assert not unopened.same and unopened.undecidable, unopened.summary
        got = [app.invoke(None, cfg(t))["log"] for t in ("x", "y")]
        assert got == [["in", "n read [] 0"], ["in", "n read [] 0"]]


def test_lg_diff_exits_11_on_an_empty_list_against_none(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver, _Reduced)
        for t in ("x", "y"):
            app.invoke({"log": ["in"]}, cfg(t))
    out = lg_diff(url, "x", "y")
    assert out.returncode == 11, (out.returncode, out.stdout, out.stderr)  # before: 12
