"""Many hosts on one PostgreSQL store: writer processes with their own connections.

Each writer process (spawned, its own pool) records its own run, takes turns
on one shared run by compare-and-set, and appends audit records; a pruner
process may sweep beside them. Afterwards every acknowledged checkpoint is
stored (own runs: the exact history; the shared run: every acknowledged id
in the one linear lineage), the audit log has every acknowledged record at
the index it was given, and verify is clean. ``-m soak`` runs it for a minute
(``CPSTORE_PG_SOAK_SECONDS``) and prints figures.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import threading
import time
from typing import Any

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError, NotFoundError

SOAK = os.environ.get("CPSTORE_SOAK") == "1"


def _writer(url: str, name: str, seconds: float) -> dict[str, Any]:
    own: list[str] = []
    shared: list[str] = []
    audit: list[tuple[str, int]] = []
    conflicts = 0
    rng = random.Random(name)
    with cpstore.open(url) as st:
        rec = st.recorder(name)
        deadline = time.monotonic() + seconds
        step = 0
        while time.monotonic() < deadline:
            rec.observe(step, "cfg", b"c%d" % step, pinned_at=float(step))
            rec.tokens([("rng", rng.random())])
            own.append(rec.checkpoint(step, {"w": name, "i": step}))
            a = st.append_audit("note", {"writer": name, "step": step})
            audit.append((a.digest, a.index))
            while True:  # the shared branch: CAS from the head read; a lost race retries
                head = st.ref("shared")
                try:
                    srec = st.recorder("shared", parent=head)
                    # Steps never go backwards on a branch: the shared one counts its own.
                    sstep = 0 if srec.head is None else st.manifest(srec.head).step + 1
                    shared.append(srec.checkpoint(sstep, {"by": name, "i": step}))
                    break
                except ConflictError:
                    conflicts += 1
            step += 1
    return {"own": own, "shared": shared, "audit": audit, "conflicts": conflicts, "name": name}


def _pruner(url: str, seconds: float) -> int:
    sweeps = 0
    with cpstore.open(url) as st:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            st.prune(keep_last=3)
            sweeps += 1
            time.sleep(0.05)
    return sweeps


def _run(url: str, writers: int, seconds: float, *, prune: bool) -> dict[str, Any]:
    with cpstore.open(url):
        pass  # made once, before the writers race to open it
    ctx = multiprocessing.get_context("spawn")
    started = time.monotonic()
    with ctx.Pool(writers + 1) as pool:
        pruning = pool.apply_async(_pruner, (url, seconds)) if prune else None
        results = pool.starmap(_writer, [(url, f"w{i}", seconds) for i in range(writers)])
        sweeps = pruning.get() if pruning is not None else 0
    elapsed = time.monotonic() - started
    with cpstore.open(url) as st:
        report = st.verify()
        assert report.ok, report.problems
        lineage = [m.id for m in st.history("shared")]
        acked_shared = [c for r in results for c in r["shared"]]
        if not prune:
            for r in results:  # own runs: exactly what was acknowledged, in order
                assert [m.id for m in st.history(r["name"])] == r["own"][::-1]
            assert sorted(lineage) == sorted(acked_shared)  # one linear chain, nothing lost
        else:
            for r in results:
                assert st.ref(r["name"]) == r["own"][-1]
            assert st.ref("shared") in acked_shared
        indexes = sorted(i for r in results for _, i in r["audit"])
        assert indexes == list(range(len(indexes)))  # every append at its own index
        for r in results:
            for digest_hex, index in r["audit"]:
                assert st.get_audit(digest_hex).index == index
        figures = {
            "writers": writers,
            "seconds": round(elapsed, 2),
            "checkpoints": sum(len(r["own"]) + len(r["shared"]) for r in results),
            "checkpoints_per_s": round(
                sum(len(r["own"]) + len(r["shared"]) for r in results) / elapsed, 1
            ),
            "audit_records": len(indexes),
            "cas_conflicts": sum(r["conflicts"] for r in results),
            "prune_sweeps": sweeps,
        }
    return figures


class TestManyHosts:
    def test_writer_processes_on_own_runs_and_one_shared_run_lose_nothing(
        self, pg_url: str
    ) -> None:
        """3 processes, 3 s: exact own histories, one linear shared chain, audit indexes 0..n-1."""
        fig = _run(pg_url, 3, 3.0, prune=False)
        assert fig["checkpoints"] > 0

    def test_prune_beside_live_writers_keeps_every_head_and_verifies_clean(
        self, pg_url: str
    ) -> None:
        """A pruner process sweeping every 50 ms beside writers: heads stay, verify clean."""
        fig = _run(pg_url, 2, 2.5, prune=True)
        assert fig["prune_sweeps"] > 0

    def test_a_stale_recorder_loses_the_cas_with_a_clear_error(self, pg_url: str) -> None:
        """Two handles (two connections) on one branch: the second commit is a ConflictError."""
        with cpstore.open(pg_url) as a, cpstore.open(pg_url) as b:
            a.recorder("run").checkpoint(0, {"a": 0})
            ra, rb = a.recorder("run"), b.recorder("run")
            ra.checkpoint(1, {"a": 1})
            with pytest.raises(ConflictError) as err:
                rb.checkpoint(1, {"b": 1})
            assert err.value.where == "refs/run/main"
            assert [m.step for m in b.history("run")] == [1, 0]
            with pytest.raises(NotFoundError):
                b.manifest("00" * 16)

    def test_a_second_writer_waits_for_the_first_to_commit(self, pg_url: str) -> None:
        """The writer lock: another handle's append blocks until the open write txn commits."""
        with cpstore.open(pg_url) as a, cpstore.open(pg_url) as b:
            inside, release = threading.Event(), threading.Event()
            order: list[str] = []

            def hold(txn: Any) -> None:
                txn.get(b"x", db=a.backend.db("meta"))  # the lock is taken with this round trip
                inside.set()
                release.wait(10)
                order.append("first committed")

            def append() -> None:
                b.append_audit("note", {"by": "b"})
                order.append("second committed")

            first = threading.Thread(target=lambda: a.backend.write_txn(hold))
            first.start()
            assert inside.wait(10)
            second = threading.Thread(target=append)
            second.start()
            second.join(0.5)
            assert second.is_alive() and order == []  # waiting on the lock, not interleaving
            release.set()
            first.join(10)
            second.join(10)
            assert order == ["first committed", "second committed"]
            assert [r.index for r in a.audit_records()] == [0]

    @pytest.mark.soak
    @pytest.mark.skipif(not SOAK, reason="set CPSTORE_SOAK=1")
    def test_many_hosts_soak(self, pg_url: str) -> None:
        """4 writers and a pruner for a minute (CPSTORE_PG_SOAK_SECONDS); figures printed."""
        seconds = float(os.environ.get("CPSTORE_PG_SOAK_SECONDS", "60"))
        plain = _run(pg_url, 4, seconds, prune=False)
        print(json.dumps({"suite": "pg many hosts", **plain}))
