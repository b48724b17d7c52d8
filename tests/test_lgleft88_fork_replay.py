"""lgleft88: a time travel of a checkpoint whose ``source`` is ``"fork"``, resumed for
real; and what the diff's subgraph reads cost on a long thread.

LangGraph 1.2.24 puts a ``"fork"`` checkpoint for ``update_state(config, None,
as_node="__copy__")`` (beside the original, under its parent) and when a time travel
resumes (after the addressed checkpoint). A time travel of such a checkpoint bounds the
subgraph state it loads by the fork's parent, not the fork (``_loop``: ``source`` in
``("update", "fork")``), which ``_diff_subgraphs.replay_bound`` reads; lgleft87 tested
``"update"`` only. Here each fork is resumed named and unnamed, with a plain and a
``checkpointer=True`` subgraph whose ``pre`` ran before the interrupted ``asks``:
named against unnamed, the subgraph starts over (``pre`` again) on the named side only
and the diff says undecidable, but for a plain one under a ``__copy__``, which never
ran it (its task id is the copy's): both start it over, the same; both named are the
same and resume alike under None, ``Command(resume=...)`` and
``Command(update=...)``. Had the bound been the fork's own id the kept cases would be
"same" (the subgraph's newest state sits below the fork). Both engines."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.graph import START, StateGraph
from langgraph.types import Command
from lg_threads import LogState, asks_subgraph, cfg, with_subgraph
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_lgleft88_kept_moved_on import _ids, _run

import cpstore.langgraph._diff_subgraphs as subgraphs
from cpstore.langgraph import CpstoreSaver, diff_threads
from cpstore.langgraph._read import thread_entries

#: How each thread's newest checkpoint is made a fork of the interrupted ``P1``.
_FORKS = ("copy", "none", "update")

_RESUMES: dict[str, Any] = {
    "None": None,
    "resume": Command(resume="y"),
    "update": Command(update={"log": ["U"]}),
}


def _forked(app: Any, saver: CpstoreSaver, thread: str, fork: str) -> str:
    """``thread`` interrupted in ``sub`` at ``P1``, then forked: the fork's id."""
    app.invoke({"log": ["in"]}, cfg(thread))
    p1 = _ids(saver, thread)[0]
    if fork == "copy":
        app.update_state(cfg(thread, p1), None, as_node="__copy__")
    elif fork == "none":
        app.invoke(None, cfg(thread, p1))
    else:
        app.invoke(Command(update={"log": ["u"]}), cfg(thread, p1))
    newest = saver.get_tuple(cfg(thread))
    assert newest is not None and newest.metadata.get("source") == "fork"
    return _ids(saver, thread)[0]


@pytest.mark.parametrize("kept", [True, False])
@pytest.mark.parametrize("fork", _FORKS)
def test_a_fork_named_against_unnamed_is_undecidable_when_its_subgraph_starts_over(
    url: str, fork: str, kept: bool
) -> None:
    """A ``__copy__`` never ran its plain subgraph (its task id is new): both sides
    start it over, the same. A kept one, or one a time travel's fork ran, goes on from
    its newest state on the side naming none and starts over on the named side."""
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = with_subgraph(saver, runs, "pre", kept=kept)
        ids = {t: _forked(app, saver, t, fork) for t in ("u1", "u2", "n1", "n2")}
        over = kept or fork != "copy"
        diff = diff_threads(saver.store, cfg("u1"), cfg("n1", ids["n1"]))
        assert diff.same != over and diff.undecidable == over, diff.summary
        unnamed = _run(app, runs, None, cfg("u1"))
        named = _run(app, runs, None, cfg("n1", ids["n1"]))
        assert named[2] == ["asks", "pre"]  # the fork's parent bounds the subgraph
        assert (unnamed == named) != over and unnamed[:2] == named[:2], (unnamed, named)
        got = [_run(app, runs, _RESUMES["resume"], c) for c in (cfg("u2"), cfg("n2", ids["n2"]))]
        assert got[0] == got[1]


@pytest.mark.parametrize("kept", [True, False])
@pytest.mark.parametrize("fork", _FORKS)
def test_forks_both_named_are_the_same_and_resume_alike(url: str, fork: str, kept: bool) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = with_subgraph(saver, runs, "pre", kept=kept)
        names = [f"{s}{k}" for k in _RESUMES for s in "ab"]
        ids = {t: _forked(app, saver, t, fork) for t in ["a", "b", *names]}
        diff = diff_threads(saver.store, cfg("a", ids["a"]), cfg("b", ids["b"]))
        assert diff.same, diff.summary
        for kind, value in _RESUMES.items():
            got = [_run(app, runs, value, cfg(s + kind, ids[s + kind])) for s in "ab"]
            assert got[0] == got[1], (kind, got)


def test_the_subgraph_reads_scan_each_thread_once(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three ``checkpointer=True`` subgraphs mid-run, a side named against one naming
    none: each thread's index entries are read once per diff (lgleft88: 28 scans before,
    each of the whole thread, once per subgraph found and level)."""
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        parent = StateGraph(LogState)
        for i in range(3):
            parent.add_node(f"sub{i}", asks_subgraph(runs, "pre", kept=True))
            parent.add_edge(START, f"sub{i}")
        app = parent.compile(checkpointer=saver)
        for t in ("a", "b"):
            app.invoke({"log": ["in"]}, cfg(t))
        scans: list[str] = []

        def counted(txn: Any, meta: Any, threads: Any) -> Any:
            scans.extend(threads)
            return thread_entries(txn, meta, threads)

        monkeypatch.setattr(subgraphs, "thread_entries", counted)
        diff = diff_threads(saver.store, cfg("a"), cfg("b", _ids(saver, "b")[0]))
        assert diff.undecidable and {"sub0", "sub1", "sub2"} <= set(diff.nodes), diff.summary
        assert sorted(scans) == ["a", "b"], scans  # before: 28
        scans.clear()
        assert diff_threads(saver.store, cfg("a"), cfg("b")).same
        assert sorted(scans) == ["a", "b"], scans
