"""lgleft87: a resume invoked with a ``Command`` without ``resume``
(``Command(update=...)``, ``Command(goto=...)``, both) time-travels as one invoked with
None does, and ``diff_threads``'s answer for it is the one review86 gave for None.

LangGraph 1.2.24's ``_loop`` counts a run addressed at a checkpoint id as a time
travel unless its input is a ``Command`` whose ``resume`` is set: on the side whose
config names its thread's newest checkpoint (or one its thread moved past) a finished
task runs again and the resume values consumed are dropped, its interrupts asked
again; on a side naming none they are handed back. docs/langgraph.md said so; no test
resumed with such a ``Command``. Here each is resumed for real: the named side and
the moved-past side run alike, the side naming none otherwise, and the diff says
undecidable for named against unnamed (a divergence for moved past against unnamed
when a finished task's writes are pending: that side reruns it with every input).
Named newest against moved past run alike with these: the diff says the same when
only resume values are pending, undecidable when a finished task's writes are
(``Command(resume=...)`` reruns it on the moved-past side only). Both engines."""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.types import Command
from lg_threads import cfg, fast_beside_asks, invoked, started
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_review86_named_newest import _twice

from cpstore.langgraph import CpstoreSaver, diff_threads

#: The ``Command``s without ``resume`` tried, by name (``goto``: the graph's node).
_COMMANDS = ("update", "goto", "update+goto")


def _command(kind: str, node: str) -> Command[Any]:
    if kind == "update":
        return Command(update={"log": ["up"]})
    if kind == "goto":
        return Command(goto=node)
    return Command(update={"log": ["up"]}, goto=node)


def _run(app: Any, runs: list[str], value: Any, conf: Any) -> tuple[Any, list[str], list[str]]:
    return invoked(app, runs, value, conf, sort=True)  # the log sorted


@pytest.mark.parametrize("kind", _COMMANDS)
def test_a_command_without_resume_reruns_a_finished_task_on_the_named_side(
    url: str, kind: str
) -> None:
    """``fast`` finished beside the interrupted ``asks``."""
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = fast_beside_asks(saver, runs)
        ids = started(app, saver, ("u", "n", "p"), moved_past=("p",))
        named = diff_threads(saver.store, cfg("u"), cfg("n", ids["n"]))
        assert not named.same and named.undecidable and named.nodes == ("fast",), named.summary
        past = diff_threads(saver.store, cfg("u"), cfg("p", ids["p"]))
        assert not past.same and not past.undecidable and past.nodes == ("fast",), past.summary
        # named newest against moved past: alike with these (and None), not with
        # Command(resume=...), which hands fast's writes back on the newest only (lgleft86)
        both = diff_threads(saver.store, cfg("n", ids["n"]), cfg("p", ids["p"]))
        assert not both.same and both.undecidable, both.summary
        cmd = _command(kind, "fast")
        unnamed = _run(app, runs, cmd, cfg("u"))
        assert unnamed[2] == []  # fast's writes handed back
        again = _run(app, runs, cmd, cfg("n", ids["n"]))
        assert again[2] == ["fast"] and again[:2] == unnamed[:2]  # fast ran again
        assert _run(app, runs, cmd, cfg("p", ids["p"])) == again


@pytest.mark.parametrize("kind", _COMMANDS)
def test_a_command_without_resume_drops_the_resume_values_on_the_named_side(
    url: str, kind: str
) -> None:
    """``twice`` had its first of two interrupts answered."""
    with CpstoreSaver.from_conn_string(url) as saver:
        runs: list[str] = []
        app = _twice(saver, runs)
        ids = started(app, saver, ("u", "n", "p"), Command(resume="A1"), moved_past=("p",))
        for other in (cfg("n", ids["n"]), cfg("p", ids["p"])):
            diff = diff_threads(saver.store, cfg("u"), other)
            assert not diff.same and diff.undecidable, diff.summary
            assert diff.nodes == ("twice",) and "__resume__" in diff.channels, diff.summary
        assert diff_threads(saver.store, cfg("n", ids["n"]), cfg("p", ids["p"])).same
        cmd = _command(kind, "twice")
        logged = ["in", "up"] if "update" in kind else ["in"]
        # naming none the first answer is kept: the second interrupt is asked
        assert _run(app, runs, cmd, cfg("u")) == (logged, ["second?"], ["twice"])
        # named (newest or moved past) it is dropped: the first is asked again
        asked = (logged, ["first?"], ["twice"])
        assert _run(app, runs, cmd, cfg("n", ids["n"])) == asked
        assert _run(app, runs, cmd, cfg("p", ids["p"])) == asked
