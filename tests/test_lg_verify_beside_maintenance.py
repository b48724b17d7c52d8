"""verify() over and over while another process runs a DeltaChannel graph, copies the
thread, prunes it (keep_latest) and deletes the copies (LMDB and PostgreSQL): every
verify reads one snapshot, so it sees the store between two of the other process's
txns — a keep_latest reclaim half done, a copy half made, a delete between its drop
and its sweep. None of those states is a problem: every report is clean, the lineage
check (tests/test_lg_verify_lineage.py) included.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from lg_delta import graph as delta_graph
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver
from cpstore.store.model import VerifyReport

_ROUNDS = 6

_WORKER = (
    "import sys\nsys.path.insert(0, sys.argv[2])\nfrom lg_delta import graph\n"
    "from cpstore.langgraph import CpstoreSaver\n"
    "with CpstoreSaver.from_conn_string(sys.argv[1]) as s:\n"
    "    g = graph(s, rare=True)\n"
    "    print('ready', flush=True)\n"
    "    for i in range(int(sys.argv[3])):\n"
    "        g.invoke({'log': [f'in{i}']}, {'configurable': {'thread_id': 'd'}})\n"
    "        s.copy_thread('d', f'c{i}')\n"
    "        s.prune(['d'])\n"
    "        g.invoke({'log': [f'again{i}']}, {'configurable': {'thread_id': f'c{i}'}})\n"
    "        if i:\n"
    "            s.delete_thread(f'c{i - 1}')\n"
)


def test_every_verify_beside_a_saver_at_work_is_clean(url: str) -> None:
    config: dict[str, Any] = {"configurable": {"thread_id": "d"}}
    with CpstoreSaver.from_conn_string(url) as saver:
        graph = delta_graph(saver, rare=True)
        graph.invoke({"log": ["first"]}, config)
        worker = subprocess.Popen(
            [sys.executable, "-c", _WORKER, url, str(Path(__file__).parent), str(_ROUNDS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert worker.stdout is not None and worker.stdout.readline().strip() == "ready"
            reports: list[VerifyReport] = []
            while worker.poll() is None or not reports:
                report = saver.store.verify()
                reports.append(report)
                assert report.ok, (len(reports), report.problems)
        finally:
            if worker.poll() is None:
                worker.kill()
        assert worker.wait(timeout=300) == 0
        final = saver.store.verify()
        assert final.ok, final.problems
        want = ["first", "n1"]
        for i in range(_ROUNDS):
            want += [f"in{i}", f"n{len(want) + 1}"]
        assert graph.get_state(config).values["log"] == want
        last = {"configurable": {"thread_id": f"c{_ROUNDS - 1}"}}
        assert graph.get_state(last).values["log"][-2] == f"again{_ROUNDS - 1}"
