"""A permit's use racing what would make it stale: a newer decision, a reset and a sweep.

Each round one checkpoint has a standing QUARANTINE, signed off, and a resume permit for
it. Three processes start together: one opens ``store.recorder(run, permit=)`` and
records on; one appends a newer decision about the same checkpoint (a REJECT no sign-off
releases); one resets the branch away from that checkpoint, releases the hold and prunes
(the checkpoint is swept). Whatever order the writer lock gives them:

* the permit is used (a ``resume`` record) only before the newer decision's record, and
  a recorder is made only when its permit's record stands: granted <=> used <=> the
  ``resume`` record precedes the REJECT;
* a recorder made records on only while its branch is where it read it: a checkpoint it
  was told stored reads back whole, on a branch whose head it is (never a swept parent's
  child), and one it was refused is not stored;
* ``verify()`` is clean at the end.

Real processes (``spawn``), LMDB and PostgreSQL.
"""

from __future__ import annotations

import multiprocessing
import time
from typing import Any

from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.decision.gates import AUDIT_RESUME, resume_gate, sign_off
from cpstore.decision.table import FindingCode
from cpstore.errors import ConflictError, CpstoreError, GateError, NotFoundError

ROUNDS = 16
#: Per round, how long the decider and the sweeper wait after the barrier (seconds): only
#: to vary which of the three lands first; nothing asserts on time.
STAGGER = (0.0, 0.01, 0.03, 0.08)
WAIT = 120


def _decide(st: cpstore.Store, cid: str, run: str, did: str, code: str) -> str:
    body = {
        "decision_id": did,
        "recorded": {"checkpoint_id": cid, "run_id": run, "branch": "main"},
        "mode": "strict",
        "findings": [{"code": code}],
        "verdict": "QUARANTINE" if code == FindingCode.BEST_EFFORT.value else "REJECT",
    }
    return st.append_audit("decision", body).digest


def _resumer(url: str, barrier: Any, rounds: list[tuple[str, str, str]]) -> list[Any]:
    out: list[Any] = []
    with cpstore.open(url) as st:
        for run, _cid, permit in rounds:
            barrier.wait()
            try:
                rec = st.recorder(run, permit=permit)
            except (GateError, ConflictError, NotFoundError) as exc:
                out.append(("refused", type(exc).__name__))
                continue
            try:
                got = rec.checkpoint(99, {"after": run})
                out.append(("stored", got))
            except CpstoreError as exc:
                out.append(("not stored", type(exc).__name__))
            rec.close()
    return out


def _decider(url: str, barrier: Any, rounds: list[tuple[str, str, str]]) -> list[Any]:
    out: list[Any] = []
    with cpstore.open(url) as st:
        for i, (run, cid, _permit) in enumerate(rounds):
            barrier.wait()
            time.sleep(STAGGER[i % 4])
            out.append(_decide(st, cid, run, f"reject-{run}", FindingCode.STATE_MISMATCH.value))
    return out


def _sweeper(url: str, barrier: Any, rounds: list[tuple[str, str, str]]) -> list[Any]:
    out: list[Any] = []
    with cpstore.open(url) as st:
        for i, (run, cid, _permit) in enumerate(rounds):
            barrier.wait()
            time.sleep(STAGGER[i // 4 % 4])
            try:
                st.reset_ref(run, "main", None, expected_old=cid, operator="o", reason="race")
            except ConflictError:
                out.append("moved first")
                continue
            st.release_retained(cid, operator="o", reason="race")
            st.prune(keep_last=1, run_id=run)
            out.append("swept")
    return out


def _report(queue: Any, slot: int, target: Any, args: tuple[Any, ...]) -> None:
    try:
        queue.put((slot, target(*args)))
    except BaseException as exc:
        args[1].abort()
        queue.put((slot, f"worker raised {exc!r}"))


def test_a_permit_is_used_only_while_it_stands(url: str) -> None:
    """Granted iff its use precedes the newer decision; what it records is kept or refused."""
    rounds: list[tuple[str, str, str]] = []
    with cpstore.open(url) as st:
        for i in range(ROUNDS):
            run = f"g{i}"
            rec = st.recorder(run)
            cid = rec.checkpoint(1, {"i": i})
            rec.close()
            _decide(st, cid, run, f"q-{run}", FindingCode.BEST_EFFORT.value)
            so = sign_off(st, f"q-{run}", operator="o", reason="race")
            rounds.append((run, cid, resume_gate(st, cid, f"q-{run}", sign_off=so).audit_digest))
    ctx = multiprocessing.get_context("spawn")
    barrier, queue = ctx.Barrier(3), ctx.Queue()
    procs = [
        ctx.Process(target=_report, args=(queue, n, target, (url, barrier, rounds)))
        for n, target in enumerate((_resumer, _decider, _sweeper))
    ]
    for p in procs:
        p.start()
    results = dict(queue.get(timeout=WAIT) for _ in procs)
    for p in procs:
        p.join(WAIT)
        assert p.exitcode == 0
    resumed, decided, swept = results[0], results[1], results[2]
    assert isinstance(resumed, list), resumed
    assert isinstance(decided, list), decided
    assert isinstance(swept, list), swept
    with cpstore.open(url) as st:
        records = list(st.audit_records())
        index = {r.digest: r.index for r in records}
        used = {r.body["permit"]: r.index for r in records if r.kind == AUDIT_RESUME}
        for (run, cid, permit), told, reject, sweep in zip(
            rounds, resumed, decided, swept, strict=True
        ):
            granted = told[0] != "refused"
            assert granted == (permit in used), (run, told)
            if granted:
                assert used[permit] < index[reject], (run, told)
            elif told[1] == "GateError":
                assert permit not in used
            head = st.ref(run)
            if told[0] == "stored":
                assert head == told[1], (run, told, sweep)
                assert st.manifest(told[1]).parent == cid
                assert st.verify_checkpoint(told[1]) == ()
                assert st.verify_checkpoint(cid) == ()
            elif told[0] == "not stored":
                assert head is None and sweep == "swept", (run, told, sweep)
        report = st.verify()
        assert report.ok, report.problems[:3]
