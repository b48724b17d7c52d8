"""LangGraph prune(keep_latest) over and over while another process runs a graph whose
state is a DeltaChannel on the same thread (LMDB and PostgreSQL): the state the graph
reads at the end is exactly what its runs wrote, with and without snapshots taken.

Every run reads the state (the delta history back to a snapshot or the root) and adds
two lines; a prune between or during runs may drop only what that history does not
need. The oracle is the deterministic log: run i adds ``in{i}`` and ``n{2i+1}``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lg_delta import graph as delta_graph
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver

_RUNS = 8

_WORKER = (
    "import sys\nsys.path.insert(0, sys.argv[2])\nfrom lg_delta import graph\n"
    "from cpstore.langgraph import CpstoreSaver\n"
    "with CpstoreSaver.from_conn_string(sys.argv[1]) as s:\n"
    "    g = graph(s, rare=sys.argv[3] == 'rare')\n"
    "    print('ready', flush=True)\n"
    "    for i in range(int(sys.argv[4])):\n"
    "        g.invoke({'log': [f'in{i}']}, {'configurable': {'thread_id': 'd'}})\n"
)


@pytest.mark.parametrize("snapshots", ["rare", "every4"])
def test_a_delta_graph_pruned_while_it_runs_keeps_its_state(url: str, snapshots: str) -> None:
    config: dict[str, Any] = {"configurable": {"thread_id": "d"}}
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = delta_graph(saver, rare=snapshots == "rare")
        graph.invoke({"log": ["first"]}, config)  # the thread exists before any prune
        worker = subprocess.Popen(
            [sys.executable, "-c", _WORKER, url, str(Path(__file__).parent), snapshots, str(_RUNS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
        prunes = 0
        while worker.poll() is None or prunes == 0:
            saver.prune(["d"])
            prunes += 1
        assert worker.wait(timeout=300) == 0
        want = ["first", "n1"]
        for i in range(_RUNS):
            want += [f"in{i}", f"n{len(want) + 1}"]
        assert graph.get_state(config).values["log"] == want
        saver.prune(["d"])
        assert graph.get_state(config).values["log"] == want
        assert saver.store.verify().ok
