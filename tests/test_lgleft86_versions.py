"""lgleft86: a channel version hand-set to ``""`` (LangGraph's null version for string
versions) on one thread's last checkpoint.

LangGraph runs a node when one of its triggers is newer than the version it saw, and
``versions_seen`` records only the node's triggers. On a ``StateGraph``, ``log``'s
version set to ``""`` changed no node's triggers and both resumes ran ``n``, while
``diff_threads`` said "a resume from the last runs other tasks: node __input__,
__start__, a" (a false divergence). On a Pregel graph whose ``two`` reads ``c`` but ran
before ``c`` had a version (so its ``versions_seen`` does not name it), the same edit
on ``c`` stopped ``two`` from running again: whether a channel no ``versions_seen``
names is a trigger is not known without the graph, so both are undecidable (exit 11),
never the same. A version hand-set on a channel the node saw is a divergence, as
before (which named every node then: ``__input__, __start__, a, n``; now ``n``). Both
engines."""

from __future__ import annotations

from typing import Any

from langgraph.channels import LastValue
from langgraph.graph import END
from langgraph.pregel import NodeBuilder, Pregel
from lg_threads import LogState, a_then_n, cfg, lg_diff, put_copy
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, diff_threads


def _graph(saver: CpstoreSaver, *, again: bool = False) -> Any:
    """``a`` then ``n``, stopped before ``n``; ``again``: ``n`` goes back to ``a`` once."""

    def after_n(state: LogState) -> str:
        return "a" if again and state["log"].count("n") == 1 else END

    return a_then_n(saver, lambda _: {"log": ["a"]}, lambda _: {"log": ["n"]}, after_n=after_n)


def _version(channel: str) -> Any:
    return lambda cp: cp["channel_versions"].__setitem__(channel, "")


def _pregel(saver: CpstoreSaver) -> Any:
    """``one`` (on ``a``) writes ``c``; ``two`` (on ``a`` and ``c``) runs at step 0 beside
    ``one``, before ``c`` has a version (its ``versions_seen`` names ``a`` only), and
    again once ``c`` is newer."""
    return Pregel(
        nodes={
            "one": NodeBuilder().subscribe_only("a").do(lambda _: 5).write_to("c"),
            "two": NodeBuilder()
            .subscribe_to("a", "c")
            .do(lambda i: (i.get("c") or 0) + 1)
            .write_to("d"),
        },
        channels={"a": LastValue(int), "c": LastValue(int), "d": LastValue(int)},
        input_channels="a",
        output_channels=["c", "d"],
        checkpointer=saver,
    )


def test_a_state_key_s_version_set_to_empty_is_not_a_divergence(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver)
        app.invoke({"log": ["in"]}, cfg("a"))
        put_copy(saver, "a", "b", writes=False, edit=_version("log"))
        diff = diff_threads(saver.store, cfg("a"), cfg("b"))
        # before: "... a resume from the last (step 1) runs other tasks: node __input__,
        # __start__, a (the versions of ... log differ)", undecidable False
        assert not diff.same and diff.undecidable and diff.pending, diff.summary
        assert diff.channels == ("log",) and diff.index == 2, diff.summary
        assert "no versions_seen names it" in diff.summary, diff.summary
        got = [app.invoke(None, cfg(t))["log"] for t in "ab"]
        assert got == [["in", "a", "n"], ["in", "a", "n"]]  # the resumes run alike


def test_a_trigger_no_versions_seen_names_set_to_empty_is_undecidable(url: str) -> None:
    """The same edit where the channel is a trigger: the resumes differ, so the answer
    stays short of "same"."""
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _pregel(saver)
        app.invoke(1, cfg("a"), interrupt_after=["one"])
        tup = saver.get_tuple(cfg("a"))
        assert tup is not None and set(tup.checkpoint["versions_seen"]["two"]) == {"a"}
        put_copy(saver, "a", "b", writes=False, edit=_version("c"))
        diff = diff_threads(saver.store, cfg("a"), cfg("b"))
        assert not diff.same and diff.undecidable and diff.channels == ("c",), diff.summary
        assert "two" in diff.nodes, diff.summary
        got = [app.invoke(None, cfg(t)) for t in "ab"]
        assert got == [{"c": 5, "d": 6}, {"c": 5, "d": 1}]  # two ran again on a only


def test_a_trigger_the_node_saw_set_to_empty_is_a_divergence(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        app = _graph(saver, again=True)
        app.invoke({"log": ["in"]}, cfg("a"))
        app.invoke(None, cfg("a"))  # n runs, then a, then it stops before n again
        put_copy(saver, "a", "b", writes=False, edit=_version("branch:to:n"))
        diff = diff_threads(saver.store, cfg("a"), cfg("b"))
        assert not diff.same and not diff.undecidable, diff.summary
        assert diff.nodes == ("n",) and diff.channels == ("branch:to:n",), diff.summary
        got = [app.invoke(None, cfg(t))["log"] for t in "ab"]
        assert got == [["in", "a", "n", "a", "n"], ["in", "a", "n", "a"]]


def test_lg_diff_exits_11_on_a_version_set_to_empty(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        _graph(saver).invoke({"log": ["in"]}, cfg("a"))
        put_copy(saver, "a", "b", writes=False, edit=_version("log"))
    out = lg_diff(url, "a", "b")
    assert out.returncode == 11, (out.returncode, out.stdout, out.stderr)  # before: 12
