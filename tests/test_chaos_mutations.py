"""Model-based chaos test: worker processes mix every mutation on one store, some SIGKILLed.

Three workers (four with CPSTORE_SOAK=1) run tests/chaos_worker.py's seeded
random mix (checkpoints on own and shared runs, forks, reset/set/repair of
refs, retained heads (held twice too) and their release, prune and gc, runs deleted, pinned
objects put and unpinned, audit appends, validations and gates, durability
modes sync/none/batched, a 1 MiB starting map so it grows under load) and
tests/chaos_roles.py's (a LangGraph saver writing and reading its own thread,
push of the own run into a peer store and pull of a run recorded there, a
second batched writer thread sharing the handle's queue), and reads by name
(tests/chaos_names.py: ``resolve("RUN@BRANCH~N")``). This process
SIGKILLs a random worker (once it began its mix) every 0.3-1.5 s and restarts
it. Variants: compaction (workers open and close the store in short sessions
while tests/chaos_compactor.py runs ``compact_store`` again and again, killed
too) and PostgreSQL server crashes (``pg_ctl stop -m immediate`` and start
before some kills). After each
kill and at the end it checks, from the workers' fsynced logs, what a user
relies on (docs/store.md, docs/durability.md, docs/decision-table.md):

* ``verify()`` reports no problem, nor did a worker's ``verify()`` in the mix; no
  worker saw an error that is not a CpstoreError, nor an IntegrityError (nothing here
  damages the store but the operator, whose damaged ref alone is excused in its window),
  in a logged call or outside one;
* every acknowledged checkpoint is stored and hash-checks, unless an operation
  logged before the check could have removed it: a ``delete_run`` of its run,
  a prune after at least ``keep_last`` newer checkpoints began on its branch,
  or (fork branches) a release of a retained head of that branch, then any sweep;
* a branch only compare-and-set moves (the own and shared runs' ``main``)
  never has two acknowledged children of one parent, and its head's history
  holds only checkpoints some worker began there;
* an acknowledged pin keeps its object until unpinned; an acknowledged ``reset_ref`` (or
  repair) keeps the head it holds listed in ``retained()`` and intact until a release
  names that hold (a head is held twice: a twin branch, a second reset; chaos69);
* each acknowledged audit record is at the index it was given; the chain is
  dense and unforked; a validation of a checkpoint against itself is ACCEPT,
  against another never;
* every acknowledged LangGraph put reads back through ``get_tuple`` with the
  values put, and its acknowledged ``put_writes`` among its pending writes,
  unless a logged prune, ``delete_thread`` or saver prune could have removed it;
* the peer store verifies; every pushed head and every checkpoint recorded on
  the peer is whole there; a pulled checkpoint is an acknowledged checkpoint;
* an unknown commit outcome only across a server restart; an open racing a
  compaction fails with a CpstoreError or opens the store whose acknowledged
  checkpoints all survive;
* an acknowledged ``delete_run`` left its run without refs; a dry run said it was one;
* every refusal (a CpstoreError an operation raised, or a loop of the mix caught) is one
  tests/chaos_errors.py's table allows for that operation under what the log shows
  (connection errors only across a server restart, ConflictError only where a race,
  a dropped batch or a deletion is logged, ...); anything else names op, class, message;
* an acknowledged ``fork``/``set_ref`` is its branch's head unless a later logged move
  explains the head; every checkpoint an acknowledged ``gc`` reported removed is gone and
  was neither a retained head nor an acknowledged checkpoint the log keeps
  (tests/chaos_refs.py); an acknowledged ``resolve`` named a checkpoint the log shows at
  depth N of that branch at some time during the call (tests/chaos_names.py);
* while the operator's rollback of a ref stands (tests/chaos_rollback.py: a ``main`` ref
  put back to an older head with a true check, then ``repair_ref``), retention and
  push/pull refuse (``meta/refs_digest``) and nothing it must keep is swept: no sweep,
  push from or pull into the store is acknowledged, the
  side chain recorded on the older head is never counted as newer nor swept, and
  conflicts and resolves meanwhile are the ones the log explains;
* while the operator's vanish of a ref stands (tests/chaos_vanish.py: its row deleted,
  then put back by ``repair_ref``), no ref is created (refused naming the count), nothing
  is recorded on it, retention and push/pull refuse, and the repair names its head;
* no worker hung (every wait is bounded), and none died by itself: one found dead when
  its kill comes, or ending without ``end``, fails the run with its last log lines.

The seed is logged; ``CPSTORE_CHAOS_SEED`` replays one.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import random
import shutil
import signal
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from chaos_check import (
    Model,
    cas_linear,
    damage_holds,
    deletes_hold,
    frees,
    gates_follow_log,
    gc_names_decided,
    may_have_committed,
    peer_problems,
    read_logs,
    saver_problems,
)
from chaos_compactor import compactor, set_deadline
from chaos_errors import refusal_problems
from chaos_log import Log, ready, started
from chaos_process import work
from chaos_refs import refs_and_sweeps_hold
from chaos_rollback import DIGEST, rollback_problems
from chaos_vanish import operate, vanish_problems
from chaos_worker import SHARED
from pg_cluster import fresh_url, pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import CpstoreError, NotFoundError
from cpstore.store import copy_store

SOAK = bool(os.environ.get("CPSTORE_SOAK"))
MAP = 1 << 20


def check(
    store: cpstore.Store, logdir: Path, *, final: bool, peer: str | None = None
) -> dict[str, Any]:
    """Every invariant the module docstring lists, over the logs as they stand."""
    before = Model(read_logs(logdir))
    problems: list[str] = [f"defect: {d}" for d in before.defects]
    problems += refusal_problems(before.ops, before.errs)  # tests/chaos_errors.py's table
    # Nothing here fails a commit but a server restart (docs/store.md, "Faults"): an
    # outcome the store cannot tell outside one is a defect too.
    outages = [(b["t"], before.end(e)) for b, e in before.ops if b["op"] == "restart"]
    problems += [
        f"outcome unknown: {e}"
        for b, e in before.ops
        if e is not None
        and e.get("err") == "OutcomeUnknownError"
        and not any(b["t"] <= t1 and e["t"] >= t0 for t0, t1 in outages)
    ]
    rep = store.verify()
    problems += [f"verify: {p}" for p in rep.problems[:10]]
    # A verify() inside the mix reads one snapshot: only the operator's damaged ref (in
    # its window, plus the second the Model allows) may show in it. Logged, never checked.
    damaged = [
        (b["t"], before.end(e) + 1e9, f"where='refs/{b['run']}/{b['branch']}'")
        for b, e in before.ops
        if b["op"] == "damage"
    ] + [(r.begin, r.end + 1e9, f"where='{DIGEST}'") for r in before.rollbacks]  # rolled back
    problems += [
        f"verify in the mix: {a['problems']}"
        for b, a in before.acked("verify")
        if not a["ok"]
        and not all(  # each problem one damage's (two may overlap: chaos70)
            any(b["t"] <= t1 and a["t"] >= t0 and ref in p for t0, t1, ref in damaged)
            for p in a["problems"]
        )
    ]
    checked_ck: list[tuple[dict[str, Any], dict[str, Any]]] = []
    missing: list[tuple[dict[str, Any], dict[str, Any], str]] = []
    for b, a in before.acked("ckpt"):
        try:
            found = store.verify_checkpoint(a["cid"])
            if found:
                missing.append((b, a, str(found[:3])))
            elif store.manifest(a["cid"]).state_digest != a["sd"]:
                missing.append((b, a, "another state"))
        except CpstoreError as exc:
            missing.append((b, a, repr(exc)[:200]))
        checked_ck.append((b, a))
    pins_bad = []
    for b, a in before.acked("pin"):
        try:
            store.get_object(a["digest"])
        except CpstoreError as exc:
            pins_bad.append((b, a, repr(exc)[:200]))
    retained = store.retained()
    retained_bad = []
    for b, a in [*before.acked("reset"), *damage_holds(before)]:
        ok = a["old"] in retained and not store.verify_checkpoint(a["old"])
        if not ok:
            retained_bad.append((b, a))
    audited = ("audit", "reset", "release", "damage")
    for _, a in [x for op in audited for x in before.acked(op)]:
        got = store.get_audit(a["digest"]).index
        if got != a["index"]:
            problems.append(f"audit record {a['digest']} at {got}, acknowledged at {a['index']}")
    after = Model(read_logs(logdir))  # a removal explaining a miss was logged before this
    for b, a, why in missing:
        if not after.removable(a, b):
            problems.append(
                f"acknowledged checkpoint lost: {a['cid']} {a['run']}@{a['branch']}: {why}"
            )
    for _, a, why in pins_bad:
        if not any(  # an unpin the store refused unpinned nothing
            ub["op"] == "unpin" and ub["digest"] == a["digest"] and may_have_committed(ue)
            for ub, ue in after.ops
        ):
            problems.append(f"pinned object lost: {a['digest']}: {why}")
    for b, a in retained_bad:
        if not any(
            rb["op"] == "release"
            and rb["cid"] == a["old"]
            and after.end(re) > b["t"]
            and frees(rb, re, a["digest"])  # this reset's hold; refused, it released nothing
            for rb, re in after.ops
        ):
            problems.append(f"retained head lost: {a['old']} ({a['run']}@{a['branch']})")
    acked_ck = {a["cid"]: (b, a) for b, a in after.acked("ckpt")}
    for _, a in after.acked("validate"):
        same = a["cid"] == a["other"]
        ck = acked_ck.get(a["cid"])
        if (
            same
            and a["verdict"] != "ACCEPT"
            and ck is not None
            and not after.removable(ck[1], ck[0])
        ):
            problems.append(f"validate {a['cid']} against itself: {a['verdict']}")
        if not same and a["verdict"] == "ACCEPT":
            problems.append(f"ACCEPT for different inputs: {a['cid']} vs {a['other']}")
    problems += cas_linear(store, after, final=final)
    problems += deletes_hold(store, after)
    problems += saver_problems(store, after, lambda: Model(read_logs(logdir)))
    problems += refs_and_sweeps_hold(store, after, lambda: Model(read_logs(logdir)))
    problems += rollback_problems(store, after, frees)  # tests/chaos_rollback.py
    problems += vanish_problems(store, after)  # tests/chaos_vanish.py
    if peer is not None and final:
        problems += peer_problems(peer, after)
    if final:
        problems += gc_names_decided(store, after)
    records = list(store.audit_records())
    problems += gates_follow_log(records)
    if [r.index for r in records] != list(range(len(records))):
        problems.append("audit indexes not dense")
    if not all(y.prev == x.digest for x, y in itertools.pairwise(records)):
        problems.append("audit chain forked or broken")
    assert not problems, "\n".join(problems[:30])
    return {"checkpoints": len(checked_ck), "audit": len(records), "ops": len(after.ops)}


def _start(ctx: Any, store: str, logdir: Path, w: int, inc: int, *, seed: int, **kw: Any) -> Any:
    kwargs = {"seed": seed, "map_size": MAP, **kw}
    p = ctx.Process(target=work, args=(store, str(logdir), w, inc), kwargs=kwargs, daemon=True)
    p.start()
    return p


def _unkilled(proc: Any, logdir: Path, w: int, inc: int) -> str | None:
    """Why incarnation ``inc`` of worker ``w``, about to be killed, is already dead with no
    ``end`` (None when alive, or ended cleanly: a server restart can delay a kill past the
    deadline): something escaped it (its last log lines say what). The kill loop used to
    restart it without a word."""
    if proc.is_alive():
        return None
    proc.join(timeout=30)
    path = logdir / f"w{w}.log"
    rows = [json.loads(r) for r in (path.read_text().split("\n")[:-1] if path.exists() else [])]
    mine = [r for r in rows if r["inc"] == inc]
    if proc.exitcode == 0 and any(r["ev"] == "end" for r in mine):
        return None
    last = [json.dumps(r)[:300] for r in mine[-3:]]
    return f"worker {w} incarnation {inc} exited by itself (code {proc.exitcode}): {last}"


def _start_compactor(ctx: Any, store: str, logdir: Path, inc: int) -> Any:
    p = ctx.Process(target=compactor, args=(store, str(logdir), inc), daemon=True)
    p.start()
    return p


def chaos(
    store: str,
    logdir: Path,
    *,
    seed: int,
    workers: int,
    seconds: float,
    compact: bool = False,
    server: Any = None,
) -> dict[str, Any]:
    """Run the workers ``seconds``, kill and restart some; check after each kill and at end.

    The peer store of push/pull is a folder beside the logs. With ``compact``,
    the workers open and close the store in short sessions and a compactor
    process runs ``compact_store`` again and again (it is killed too). With
    ``server`` (a tests/pg_cluster.py Cluster), the PostgreSQL server is crashed and
    restarted (``immediate``) before some kills; the workers then use sync and batched
    only (``none`` commits with ``synchronous_commit=off``: a server crash may lose them).
    """
    print(f"chaos seed={seed} workers={workers} seconds={seconds} compact={compact}")
    logdir.mkdir(exist_ok=True)
    peer = str(logdir.parent / "peer")
    with cpstore.open(store, map_size=MAP):
        pass  # made once, before the workers race to open it
    with cpstore.open(peer):
        pass
    rng = random.Random(seed)
    ctx = multiprocessing.get_context("spawn")
    incs = dict.fromkeys(range(workers), 0)
    kw = {"peer": peer, "sessions": compact, "crash_safe": server is not None}
    procs = {w: _start(ctx, store, logdir, w, 0, seed=seed, **kw) for w in range(workers)}
    if compact:
        procs[90] = _start_compactor(ctx, store, logdir, 0)
        incs[90] = 0
    ready_by = time.monotonic() + 300
    while not all(ready(logdir, w) for w in procs):  # the run's clock starts once all are
        assert time.monotonic() < ready_by, "a worker never got ready"
        assert all(p.is_alive() for p in procs.values()), "a worker died starting"
        time.sleep(0.05)
    deadline = time.monotonic() + seconds
    set_deadline(str(logdir), deadline)
    kills = checks = restarts = 0
    died: list[str] = []
    operator = Log(str(logdir / "w99.log"), 99, 0)
    figures: dict[str, Any] = {}
    try:
        while time.monotonic() < deadline - 1.5:
            time.sleep(rng.uniform(0.3, 1.5))
            if not compact:  # compaction wants the store closed often: no operator
                operate(store, operator, rng)  # tests/chaos_vanish.py: damages, repairs
            if server is not None and rng.random() < 0.5:
                oid = operator.op()
                operator.write("b", sync=True, op="restart", id=oid)
                server.restart("immediate")
                operator.write("a", sync=True, op="restart", id=oid)
                restarts += 1
            w = rng.randrange(workers)
            if compact and rng.random() < 0.2:
                w = 90
            while (
                not started(logdir, w, incs[w])
                and procs[w].is_alive()  # one that died starting is reported below
                and time.monotonic() < deadline - 1.5
            ):
                time.sleep(0.1)  # a kill before it ran its mix tests nothing (and starves a run)
            if procs[w].is_alive() and not started(logdir, w, incs[w]):
                continue
            gone = _unkilled(procs[w], logdir, w, incs[w])
            if gone is not None:
                died.append(gone)  # restarted below: else nothing but this said so
            if procs[w].is_alive():
                os.kill(procs[w].pid, signal.SIGKILL)
                kills += 1
            procs[w].join(timeout=30)
            assert procs[w].exitcode is not None, f"worker {w} did not die"
            with cpstore.open(store, durability="none") as st:
                check(st, logdir, final=False)
                checks += 1
                if not store.startswith("postgresql:") and rng.random() < 0.3:
                    # A hot backup beside the writers: copied from one snapshot, verified whole.
                    copy = logdir.parent / f"copy{checks}"
                    assert copy_store(st, copy).ok
                    shutil.rmtree(copy)
            incs[w] += 1
            if w == 90:
                procs[w] = _start_compactor(ctx, store, logdir, incs[w])
            else:
                procs[w] = _start(ctx, store, logdir, w, incs[w], seed=seed, **kw)
        for w, p in procs.items():
            p.join(timeout=seconds + 120)
            assert p.exitcode is not None, f"worker {w} hung (seed {seed})"
        with cpstore.open(store) as st:
            figures = check(st, logdir, final=True, peer=peer)
    finally:
        for p in procs.values():
            if p.is_alive():
                p.kill()
                p.join(timeout=10)
    assert not died, "\n".join(died)
    lines = read_logs(logdir)
    ends = sum(1 for r in lines if r["ev"] == "end")
    assert ends >= len(procs), f"only {ends} workers ended cleanly (seed {seed})"
    errors: dict[str, int] = defaultdict(int)
    for r in lines:
        if r["ev"] == "x":
            errors[f"{r['op']}:{r['err']}"] += 1
    done: dict[str, int] = defaultdict(int)
    for r in lines:
        if r["ev"] == "b" and r["op"] == "compact":
            done["compact_tries"] += 1
        if r["ev"] == "a" and r["op"] in ("compact", "lgput", "lgwrite", "push", "pckpt",
                                          "ckpt", "resolve", "release", "ref_repair"):  # fmt: skip
            done[r["op"] + (":pull" if r.get("pull") else "")] += 1
    figures.update(
        kills=kills,
        checks=checks,
        restarts=restarts,
        seed=seed,
        errors=dict(errors),
        done=dict(done),
    )
    print(f"chaos figures: {figures}")
    return figures


def _seed() -> int:
    given = os.environ.get("CPSTORE_CHAOS_SEED")
    return int(given) if given else random.SystemRandom().randrange(1 << 30)


class TestChaos:
    def test_every_mutation_mixed_across_killed_processes_keeps_every_promise(
        self, tmp_path: Path
    ) -> None:
        """Three workers mix every mutation for 12 s with kills; every invariant holds."""
        figures = chaos(str(tmp_path / "s"), tmp_path / "logs", seed=_seed(), workers=3, seconds=12)
        assert figures["checkpoints"] > 0 and figures["kills"] > 0

    @pytest.mark.soak
    @pytest.mark.skipif(not SOAK, reason="set CPSTORE_SOAK=1")
    def test_soak_every_mutation_mixed_across_killed_processes(self, tmp_path: Path) -> None:
        """The same with four workers for 120 s (CPSTORE_SOAK=1)."""
        seconds = float(os.environ.get("CPSTORE_CHAOS_SECONDS", "120"))
        figures = chaos(
            str(tmp_path / "s"), tmp_path / "logs", seed=_seed(), workers=4, seconds=seconds
        )
        assert figures["checkpoints"] > 0 and figures["kills"] > 0


class TestChaosPostgres:
    def test_every_mutation_mixed_on_postgres_keeps_every_promise(
        self, pg_url: str, tmp_path: Path
    ) -> None:
        """The same mix on the PostgreSQL backend: three workers for 10 s with kills."""
        figures = chaos(pg_url, tmp_path / "logs", seed=_seed(), workers=3, seconds=10)
        assert figures["checkpoints"] > 0 and figures["kills"] > 0

    @pytest.mark.soak
    @pytest.mark.skipif(not SOAK, reason="set CPSTORE_SOAK=1")
    def test_soak_every_mutation_mixed_on_postgres(self, pg_url: str, tmp_path: Path) -> None:
        """The PostgreSQL mix with four workers for 120 s (CPSTORE_SOAK=1)."""
        seconds = float(os.environ.get("CPSTORE_CHAOS_SECONDS", "120"))
        figures = chaos(pg_url, tmp_path / "logs", seed=_seed(), workers=4, seconds=seconds)
        assert figures["checkpoints"] > 0 and figures["kills"] > 0


class TestChaosServerRestarts:
    def test_server_crashes_amid_the_mix_lose_no_acknowledged_checkpoint(
        self, pg_cluster: Any, tmp_path: Path
    ) -> None:
        """The PostgreSQL mix (sync, batched) for 10 s with the server crashed and restarted
        before some kills: nothing acknowledged lost, errors meanwhile documented, no hang."""
        url = fresh_url()
        figures = chaos(
            url, tmp_path / "logs", seed=_seed(), workers=3, seconds=10, server=pg_cluster
        )
        assert figures["checkpoints"] > 0 and figures["kills"] > 0

    @pytest.mark.soak
    @pytest.mark.skipif(not SOAK, reason="set CPSTORE_SOAK=1")
    def test_soak_server_crashes_amid_the_mix(self, pg_cluster: Any, tmp_path: Path) -> None:
        """The server-crash mix with four workers for 120 s (CPSTORE_SOAK=1)."""
        seconds = float(os.environ.get("CPSTORE_CHAOS_SECONDS", "120"))
        figures = chaos(
            fresh_url(), tmp_path / "logs", seed=_seed(), workers=4, seconds=seconds,
            server=pg_cluster,
        )  # fmt: skip
        assert figures["checkpoints"] > 0 and figures["restarts"] > 0


class TestChaosCompaction:
    def test_compaction_racing_workers_in_short_sessions_loses_no_acknowledged_checkpoint(
        self, tmp_path: Path
    ) -> None:
        """Three workers in short open/close sessions, a compactor compacting again and again
        (both killed too), 10 s: every invariant holds, an open meanwhile fails documented."""
        figures = chaos(
            str(tmp_path / "s"), tmp_path / "logs", seed=_seed(), workers=3, seconds=10,
            compact=True,
        )  # fmt: skip
        assert figures["checkpoints"] > 0 and figures["kills"] > 0
        assert figures["done"]["compact_tries"] > 0

    @pytest.mark.soak
    @pytest.mark.skipif(not SOAK, reason="set CPSTORE_SOAK=1")
    def test_soak_compaction_racing_workers_in_short_sessions(self, tmp_path: Path) -> None:
        """The compaction mix: four workers for 120 s (CPSTORE_SOAK=1); some compactions land."""
        seconds = float(os.environ.get("CPSTORE_CHAOS_SECONDS", "120"))
        figures = chaos(
            str(tmp_path / "s"), tmp_path / "logs", seed=_seed(), workers=4, seconds=seconds,
            compact=True,
        )  # fmt: skip
        assert figures["checkpoints"] > 0 and figures["done"].get("compact", 0) > 0


def _fake_log(logdir: Path, lines: list[dict[str, Any]]) -> None:
    """A worker log holding ``lines`` (times in order)."""
    logdir.mkdir()
    rows = [json.dumps({"t": i + 1, "w": 0, "inc": 0, **r}) for i, r in enumerate(lines)]
    (logdir / "w0.log").write_text("\n".join(rows) + "\n")


class TestCheckerBites:
    def _store(self, tmp_path: Path) -> tuple[cpstore.Store, str]:
        st = cpstore.open(tmp_path / "s")
        cid = st.recorder(SHARED).checkpoint(0, {"a": 1})
        return st, cid

    def test_an_acknowledged_checkpoint_the_store_lacks_is_reported_lost(
        self, tmp_path: Path
    ) -> None:
        """An acked checkpoint nothing removed and the store lacks fails the check."""
        st, _ = self._store(tmp_path)
        ghost = {"run": "own-w0", "branch": "main", "parent": None, "sd": "0" * 32}
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "ckpt", "id": "1", **ghost},
            {"ev": "a", "op": "ckpt", "id": "1", "cid": "ab" * 16, **ghost},
        ])  # fmt: skip
        with st, pytest.raises(AssertionError, match="acknowledged checkpoint lost"):
            check(st, tmp_path / "logs", final=True)

    def test_a_deletion_in_the_log_explains_a_missing_checkpoint(self, tmp_path: Path) -> None:
        """The same ack followed by a delete_run of its run passes."""
        st, _ = self._store(tmp_path)
        ghost = {"run": "tmp-x", "branch": "main", "parent": None, "sd": "0" * 32}
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "ckpt", "id": "1", **ghost},
            {"ev": "a", "op": "ckpt", "id": "1", "cid": "ab" * 16, **ghost},
            {"ev": "b", "op": "delete", "id": "2", "run": "tmp-x"},
        ])  # fmt: skip
        with st:
            check(st, tmp_path / "logs", final=True)

    def test_two_acknowledged_children_of_one_parent_are_a_bypassed_cas(
        self, tmp_path: Path
    ) -> None:
        """Two acked checkpoints on a CAS-only branch naming one parent fail the check."""
        st, cid = self._store(tmp_path)
        with st:
            sd = st.manifest(cid).state_digest
            lines: list[dict[str, Any]] = []
            for n, child in (("1", cid), ("2", "ab" * 16)):
                fields = {"run": SHARED, "branch": "main", "parent": "cd" * 16, "sd": sd}
                lines += [
                    {"ev": "b", "op": "ckpt", "id": n, **fields},
                    {"ev": "a", "op": "ckpt", "id": n, "cid": child, **fields},
                ]
            _fake_log(tmp_path / "logs", lines)
            with pytest.raises(AssertionError, match="a CAS was bypassed"):
                check(st, tmp_path / "logs", final=True)

    def test_an_accept_for_different_inputs_is_reported(self, tmp_path: Path) -> None:
        """A logged ACCEPT of a checkpoint validated against another fails the check."""
        st, cid = self._store(tmp_path)
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "validate", "id": "1", "cid": cid, "other": "ef" * 16},
            {"ev": "a", "op": "validate", "id": "1", "cid": cid, "other": "ef" * 16,
             "verdict": "ACCEPT"},
        ])  # fmt: skip
        with st, pytest.raises(AssertionError, match="ACCEPT for different inputs"):
            check(st, tmp_path / "logs", final=True)

    def test_an_acknowledged_langgraph_put_the_store_lacks_is_reported_lost(
        self, tmp_path: Path
    ) -> None:
        """An acked saver put that get_tuple does not find, and nothing removed, fails the check."""
        st, _ = self._store(tmp_path)
        put = {"run": "lg:lg-w0-0", "branch": "main", "thread": "lg-w0-0", "vd": "0" * 32}
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "lgput", "id": "1", "parent": None, **put},
            {"ev": "a", "op": "lgput", "id": "1", "cid": "1f0-ghost", **put},
        ])  # fmt: skip
        with st, pytest.raises(AssertionError, match="acknowledged LangGraph put lost"):
            check(st, tmp_path / "logs", final=True)

    def test_a_pushed_head_the_peer_lacks_is_reported(self, tmp_path: Path) -> None:
        """An acked push whose head the peer store does not hold fails the final check."""
        st, cid = self._store(tmp_path)
        cpstore.open(tmp_path / "peer").close()
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "push", "id": "1", "run": SHARED, "src": cid},
            {"ev": "a", "op": "push", "id": "1", "run": SHARED, "src": cid, "copied": 1},
        ])  # fmt: skip
        with st, pytest.raises(AssertionError, match="not whole in the peer"):
            check(st, tmp_path / "logs", final=True, peer=str(tmp_path / "peer"))


class TestRetainedRuns:
    def test_delete_run_keeps_a_retained_head_of_the_run_until_it_is_released(
        self, tmp_path: Path
    ) -> None:
        """delete_run leaves a head an audited reset retained, and its parent, until released."""
        with cpstore.open(tmp_path / "s") as st:
            rec = st.recorder("t")
            first = rec.checkpoint(0, {"x": 1})
            second = rec.checkpoint(1, {"x": 2})
            st.reset_ref("t", "main", first, expected_old=second, operator="o", reason="r")
            assert st.delete_run("t") == 0
            assert st.runs() == [] and list(st.retained()) == [second]
            assert st.manifest(second).parent == first and st.manifest(first).id == first
            with pytest.raises(NotFoundError):
                st.gc(delete_run="t")
            st.release_retained(second, operator="o", reason="r")
            assert st.prune(keep_last=1) == 2
            assert st.verify().ok

    def test_a_prune_of_another_run_sweeps_a_released_head(self, tmp_path: Path) -> None:
        """prune(run_id=A) sweeps run B's released head: every sweep takes what no root keeps."""
        with cpstore.open(tmp_path / "s") as st:
            st.recorder("a").checkpoint(0, {"a": 1})
            rec = st.recorder("b", branch="f")
            head = rec.checkpoint(0, {"b": 1})
            st.reset_ref("b", "f", None, expected_old=head, operator="o", reason="r")
            st.release_retained(head, operator="o", reason="r")
            assert st.gc(keep_last=5, run_id="a").checkpoints == (head,)
