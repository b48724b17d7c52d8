"""audit62: processes recording decisions about one checkpoint at once.

Every decision lands, in chain order per process, the decision index agrees with the
chain (``verify``), and the standing decision (``latest_decision``, what the gates and
``check_resume`` follow) is the last decision about the checkpoint in the chain
(docs/decision-table.md: a later decision supersedes an earlier one). LMDB and
PostgreSQL; spawned processes, and ``cpstore validate --record`` as real commands.
"""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures
from test_decision_support import stored_replay

from cpstore.decision.gates import check_resume
from cpstore.decision.table import AUDIT_DECISION, Verdict
from cpstore.decision.validate import validate
from cpstore.errors import GateError
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store

WORKERS = 3
ROUNDS = 8


def _checkpoint(store: Store, run: str) -> str:
    rec = store.recorder(run)
    rec.observe(1, "clock", b"t", pinned_at=1.0)
    rec.token("rng", 1)
    return str(rec.checkpoint(1, b"state"))


def _decider(url: str, barrier: Any, cid: str, role: int, queue: Any) -> None:
    """Record ROUNDS decisions about ``cid``: ACCEPTs and REJECTs by turn; their digests."""
    out: list[str | None] = []
    try:
        with open_store(url) as st:
            barrier.wait()
            for i in range(ROUNDS):
                faithful = (i + role) % 2 == 0
                changes = {} if faithful else {"state_digest": f"other-{role}-{i}"}
                d = validate(cid, stored_replay(st, cid, **changes), store=st)
                out.append(d.audit_digest)
    except BaseException as exc:  # the parent fails the test with it
        queue.put((role, f"worker raised {exc!r}"))
        raise
    queue.put((role, out))


def _standing_is_last_in_chain(url: str, cid: str) -> Any:
    with open_store(url) as st:
        decisions = [
            r
            for r in st.audit_records(kind=AUDIT_DECISION)
            if r.body["recorded"]["checkpoint_id"] == cid
        ]
        with st.audit_view() as log:
            latest = log.latest_decision(cid)
        assert latest is not None and latest.digest == decisions[-1].digest
        result = st.verify()
        assert result.ok, result.problems
        # check_resume follows the same standing decision.
        if latest.body["verdict"] == Verdict.ACCEPT.name:
            check_resume(st, cid, run_id="r", branch="main")
        else:
            with pytest.raises(GateError):
                check_resume(st, cid, run_id="r", branch="main")
        return decisions


def test_racing_processes_all_land_and_the_last_stands(url: str) -> None:
    with open_store(url) as st:
        cid = _checkpoint(st, "r")
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(WORKERS), ctx.Queue()
    procs = [
        ctx.Process(target=_decider, args=(url, barrier, cid, role, queue))
        for role in range(WORKERS)
    ]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=300) for _ in procs)
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0, results
    decisions = _standing_is_last_in_chain(url, cid)
    order = [r.digest for r in decisions]
    assert len(order) == WORKERS * ROUNDS
    for role in range(WORKERS):
        mine = results[role]
        assert isinstance(mine, list) and len(mine) == ROUNDS, mine
        positions = [order.index(d) for d in mine]  # each landed once
        assert positions == sorted(positions)  # in this process's order


def test_racing_cli_records_all_land_and_the_last_stands(url: str, tmp_path: Path) -> None:
    with open_store(url) as st:
        cid = _checkpoint(st, "r")
        other = _checkpoint(st, "o")  # validating cid against it: a REJECT
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    cmds = []
    for w in range(WORKERS):
        replay = cid if w % 2 == 0 else other
        script = "; ".join(
            ["from cpstore.cli import main", "import sys", "codes = []"]
            + [
                f"codes.append(main(['validate', {cid!r}, {replay!r}, '--store', {url!r}, "
                "'--record', '--json']))"
            ]
            * 4
            + ["sys.exit(0 if all(c in (0, 10, 11) for c in codes) else 1)"]
        )
        cmds.append(
            subprocess.Popen(
                [sys.executable, "-c", script],
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
        )
    for proc in cmds:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err.decode()
    decisions = _standing_is_last_in_chain(url, cid)
    assert len(decisions) == WORKERS * 4
