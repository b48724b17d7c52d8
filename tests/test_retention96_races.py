"""A sweeper process beside writers that record, fork, reset, release and use permits.

One process loops ``prune(keep_last=1|2)``, ``gc(keep_last=, run_id=)`` and
``delete_run`` of scratch runs; each worker process owns its run and, round after
round: records on main, forks a branch from a checkpoint behind its head (refused
"pruned" when the sweep took it first), resets the branch back (a hold), releases every
other hold it made, validates nothing but signs a QUARANTINE-free path through the gates
(a recorded ACCEPT decision about its head, then ``store.recorder`` on from it), and
records a scratch run the sweeper may delete. Each worker returns what it was told:
its refs' heads and the holds it keeps. Afterwards:

* no ref of a worker's run moved but by the worker: each head is the one it last wrote;
* every head, and every held checkpoint, reads whole with its lineage down to the first
  pruned checkpoint (``verify_checkpoint``), and the holds are exactly the ones kept;
* every operation a worker was refused was refused with a cpstore error naming the
  sweep (ConflictError / NotFoundError), and ``verify()`` is clean.

Real processes (``spawn``), both engines.
"""

from __future__ import annotations

import contextlib
import multiprocessing
from typing import Any

from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError, NotFoundError

ROUNDS = 12
WORKERS = 2
WAIT = 300


def _sweeper(url: str, stop: Any, counts: Any, ready: Any) -> None:
    n = 0
    with cpstore.open(url) as st:
        ready.set()  # the workers start now: before, a slow spawn swept nothing (ci115)
        while not stop.is_set():
            n += 1
            if n % 3 == 0:
                st.prune(keep_last=1 + n % 2)
            elif n % 3 == 1:
                for run in st.runs():
                    if run.startswith("scratch"):
                        with contextlib.suppress(NotFoundError):
                            st.delete_run(run)
            else:
                runs = [r for r in st.runs() if r.startswith("w")]
                if runs:
                    with contextlib.suppress(NotFoundError):
                        st.gc(keep_last=1, run_id=runs[n % len(runs)])
    counts.put(n)


def _worker(url: str, w: int, out: Any) -> None:
    run = f"w{w}"
    heads: dict[str, str] = {}
    holds: dict[str, str] = {}  # audit digest -> checkpoint
    refused: list[str] = []
    with cpstore.open(url) as st:
        for i in range(ROUNDS):
            rec = st.recorder(run)
            ids = []
            for step in range(3):
                rec.observe(step, "src", b"p%d" % (step % 2), pinned_at=1.0)
                ids.append(rec.checkpoint(i * 10 + step, {"i": i % 3, "s": step}))
            rec.close()
            heads["main"] = ids[-1]
            branch = f"f{i}"
            try:
                rec = st.recorder(run, branch=branch, parent=ids[0])
                a = rec.checkpoint(1000 + i, {"fork": i})
                b = rec.checkpoint(1001 + i, {"fork": i, "more": 1})
                rec.close()
                heads[branch] = b
                reset = st.reset_ref(run, branch, a, expected_old=b, operator="w", reason="t")
                heads[branch] = a
                holds[reset.digest] = b
            except (ConflictError, NotFoundError) as exc:
                refused.append(type(exc).__name__ + ": " + exc.what)
            if i % 2:
                for digest in sorted(holds)[::2]:
                    st.release_retained_by(digest, operator="w", reason="t")
                    del holds[digest]
            # A standing ACCEPT about the head: recording on from it needs no permit.
            st.append_audit(
                "decision",
                {
                    "decision_id": f"d-{w}-{i}",
                    "recorded": {"checkpoint_id": heads["main"], "run_id": run, "branch": "main"},
                    "findings": [],
                    "verdict": "ACCEPT",
                },
            )
            rec = st.recorder(f"scratch{w}-{i}")
            rec.checkpoint(1, {"scratch": i})
            rec.close()
    out.put((w, heads, holds, refused))


def test_sweeper_beside_writers_loses_nothing_acknowledged(url: str) -> None:
    """Every head and held checkpoint survives the sweeper whole; no ref moves backwards."""
    cpstore.open(url).close()
    ctx = multiprocessing.get_context("spawn")
    stop, counts, out, ready = ctx.Event(), ctx.Queue(), ctx.Queue(), ctx.Event()
    sweeper = ctx.Process(target=_sweeper, args=(url, stop, counts, ready))
    workers = [ctx.Process(target=_worker, args=(url, w, out)) for w in range(WORKERS)]
    sweeper.start()
    assert ready.wait(WAIT), "the sweeper did not open the store"
    for p in workers:
        p.start()
    results = [out.get(timeout=WAIT) for _ in workers]
    stop.set()
    sweeps = counts.get(timeout=WAIT)
    for p in [*workers, sweeper]:
        p.join(WAIT)
        assert p.exitcode == 0
    assert sweeps > 0
    with cpstore.open(url) as st:
        kept_holds: dict[str, str] = {}
        for w, heads, holds, refused in results:
            assert st.branches(f"w{w}") == heads, w
            kept_holds.update(holds)
            for what in refused:
                assert "pruned" in what or "moved" in what, what
            for branch in heads:
                for m in st.history(f"w{w}", branch):
                    assert st.verify_checkpoint(m.id) == ()
        got = {h["audit"]: cid for cid, v in st.retained().items() for h in v["holds"]}
        assert got == kept_holds
        for cid in set(kept_holds.values()):
            at: str | None = cid
            while at is not None:
                try:
                    m = st.manifest(at)
                except NotFoundError as exc:
                    assert "pruned" in exc.what, exc  # swept before it was held: allowed
                    break
                assert st.verify_checkpoint(at) == ()
                at = m.parent
        report = st.verify()
        assert report.ok, report.problems[:3]
