"""LangGraph prune(keep_latest) beside puts that extend the thread while it reclaims.

keep_latest drops the old index entries in one txn, records the kept checkpoints again
on fresh branches, resets the branches the txn saw, then sweeps the run. A branch
another process moved meanwhile fails its reset and is kept (docs/langgraph.md,
"Maintenance": "a concurrent put is never swept"). The sweep itself must not take
what the reset kept: it pruned every branch of the run to the longest kept chain, so
of two puts acknowledged in between, the older was swept (gone from ``list``,
``get_tuple`` None), and a DeltaChannel state read through it lost its history.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lg_delta import graph as delta_graph
from lg_puts import cfg, put_value
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, _maintain

_PUTS = (
    "import sys\nsys.path.insert(0, sys.argv[3])\nfrom lg_puts import put_value\n"
    "from cpstore.langgraph import CpstoreSaver\n"
    "with CpstoreSaver.from_conn_string(sys.argv[1]) as s:\n"
    "    parent = sys.argv[2]\n"
    "    for i in range(int(sys.argv[4])):\n"
    "        parent = put_value(s, 't', parent, f'late {i}')\n"
    "        print(parent, flush=True)\n"
)


def _late_puts(at: str, parent: str, n: int) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _PUTS, at, parent, str(Path(__file__).parent), str(n)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout.split()


def test_puts_acknowledged_while_keep_latest_reclaims_are_all_kept(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process puts three checkpoints (a chain from the newest) after the
    prune's txn, before its reclaim: every one of them still reads (listed, get_tuple by
    id), the thread's newest is the last of them, verify is clean."""
    with CpstoreSaver.from_conn_string(url) as saver:
        ids: list[str] = []
        for i in range(4):
            ids.append(put_value(saver, "t", ids[-1] if ids else None, f"v{i}"))
        reclaim = _maintain._reclaim
        late: list[str] = []

        def puts_then_reclaim(*args: Any) -> None:
            late.extend(_late_puts(url, ids[-1], 3))
            reclaim(*args)

        monkeypatch.setattr(_maintain, "_reclaim", puts_then_reclaim)
        saver.prune(["t"])
        assert len(late) == 3
        listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg("t"))]
        for n, cid in enumerate(late):
            tup = saver.get_tuple(cfg("t", cid))
            assert tup is not None, f"late put {n} of 3 swept"  # before: 0 and 1 swept
            assert tup.checkpoint["channel_values"] == {"x": f"late {n}"}
            assert cid in listed
        newest = saver.get_tuple(cfg("t"))
        assert newest is not None and newest.config["configurable"]["checkpoint_id"] == late[-1]
        assert saver.store.verify().ok


_INVOKE = (
    "import sys\nsys.path.insert(0, sys.argv[2])\nfrom lg_delta import graph\n"
    "from cpstore.langgraph import CpstoreSaver\n"
    "with CpstoreSaver.from_conn_string(sys.argv[1]) as s:\n"
    "    g = graph(s, rare=True)\n"
    "    for i in range(int(sys.argv[3])):\n"
    "        g.invoke({'log': [f'late{i}']}, {'configurable': {'thread_id': 'd'}})\n"
)


def test_a_delta_channel_extended_while_keep_latest_reclaims_keeps_its_state(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A graph whose DeltaChannel has no snapshot yet runs on in another process after
    the prune's txn: the state it reads afterwards is the state it had when that process
    returned. The prune keeps the whole chain (its history goes back to the root), and
    before, the sweep's keep_last (that chain's length) cut the branch the other process
    had moved: the log lost its oldest entries (its history walk met a swept checkpoint)."""
    config: dict[str, Any] = {"configurable": {"thread_id": "d"}}
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = delta_graph(saver, rare=True)
        for i in range(2):
            graph.invoke({"log": [f"in{i}"]}, config)
        reclaim = _maintain._reclaim
        seen: list[list[str]] = []

        def invoke_then_reclaim(*args: Any) -> None:
            subprocess.run(
                [sys.executable, "-c", _INVOKE, url, str(Path(__file__).parent), "3"],
                check=True,
                timeout=120,
            )
            seen.append(list(graph.get_state(config).values["log"]))
            reclaim(*args)

        monkeypatch.setattr(_maintain, "_reclaim", invoke_then_reclaim)
        saver.prune(["d"])
        assert len(seen[0]) == 10 and seen[0][-2:] == ["late2", "n9"]
        assert graph.get_state(config).values["log"] == seen[0]
        assert saver.store.verify().ok
