"""Refs and retention against a reference model: what survives a sweep, exactly.

A hypothesis state machine records, forks, moves (``set_ref``), resets (``reset_ref``,
which holds the old head), releases holds, pins objects, prunes (``keep_last``, one run
or all), runs ``gc`` (dry, then for real) and deletes runs, on one store (LMDB, or a new
PostgreSQL schema of the suite's cluster). A small model knows each checkpoint's parent,
the refs and the holds, and computes what retention must keep: each ref's head and its
newest ``keep_last`` (all of it for a run the prune does not name), the whole lineage
of every held checkpoint, up to the first checkpoint already pruned. After every step:

* the stored checkpoints are exactly the model's (a sweep removes nothing kept, and
  everything it may remove);
* every stored checkpoint reads whole (``verify_checkpoint`` finds nothing: no object
  a kept checkpoint reaches was swept, shared or not), every pinned object is stored;
* each ref names the model's head, each branch's history is the model's walk;
* a ``gc`` dry run reports exactly what the real run then removes.

States and payloads come from a small pool, so runs share objects (a swept
checkpoint's objects are also a kept one's). CI runs are derandomized;
R96_N (sequences) and R96_RANDOM=1 widen a local hunt.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from pg_cluster import fresh_url, pg_cluster  # noqa: F401 - fixture

import cpstore
from cpstore import AppendLog
from cpstore.decision.gates import resume_gate, sign_off
from cpstore.decision.table import FindingCode
from cpstore.errors import GateError, InvalidInputError, NotFoundError, SignOffError

RUNS = ("r1", "r2")
BRANCHES = ("main", "b1", "b2")
POOL = (b"alpha", b"beta", b"gamma" * 300, b"delta" * 9000)
#: A decision's findings and verdict: ACCEPT, a releasable QUARANTINE, a REJECT no
#: sign-off releases.
VERDICTS = {
    "ACCEPT": [],
    "QUARANTINE": [FindingCode.BEST_EFFORT.value],
    "REJECT": [FindingCode.STATE_MISMATCH.value],
}

Ref = tuple[str, str]

#: What the sequences did (R96_STATS=1 prints it): a sweep that removed nothing is cheap.
STATS: Counter[str] = Counter()


class Model:
    """What the store should hold."""

    def __init__(self) -> None:
        self.parent: dict[str, str | None] = {}
        self.stored: set[str] = set()
        self.refs: dict[Ref, str] = {}
        self.holds: dict[str, list[str]] = {}  # cid -> audit digests, oldest first
        self.pinned: set[bytes] = set()
        self.standing: dict[str, str] = {}  # cid -> verdict of its latest decision
        self.permits: dict[str, str] = {}  # cid -> an unused permit for its standing decision
        self.signed: set[str] = set()  # cids whose standing decision is signed off
        self.items: dict[str, list[bytes]] = {}  # cid -> its AppendLog part's elements

    def needs_permit(self, cid: str | None) -> bool:
        return cid is not None and self.standing.get(cid, "ACCEPT") != "ACCEPT"

    def lineage(self, head: str, limit: int | None) -> list[str]:
        out: list[str] = []
        at: str | None = head
        while at is not None and at in self.stored and (limit is None or len(out) < limit):
            out.append(at)
            at = self.parent[at]
        return out

    def sweep(self, keep_last: int | None, run: str | None) -> set[str]:
        live: set[str] = set()
        for (r, _), head in self.refs.items():
            limit = keep_last if keep_last is not None and (run is None or r == run) else None
            live.update(self.lineage(head, limit))
        for cid in self.holds:
            live.update(self.lineage(cid, None))
        removed = self.stored - live
        self.stored -= removed
        STATS["sweeps"] += 1
        STATS["sweeps removing"] += bool(removed)
        STATS["checkpoints removed"] += len(removed)
        return removed


class RetentionModel(RuleBasedStateMachine):
    url: str = ""

    def __init__(self) -> None:
        super().__init__()
        self.model = Model()
        self.store = cpstore.open(self.url)
        self.tick = 0

    def teardown(self) -> None:
        self.store.close()

    # -- helpers -------------------------------------------------------------

    def _cids(self) -> list[str]:
        return sorted(self.model.parent)

    def _pick(self, i: int) -> str | None:
        cids = self._cids()
        return cids[i % len(cids)] if cids else None

    def _record(self, run: str, branch: str, parent: str | None, steps: int, k: int) -> None:
        start = parent if parent is not None else self.model.refs.get((run, branch))
        if self.model.needs_permit(start):
            assert start is not None
            with pytest.raises(GateError):
                self.store.recorder(run, branch=branch, parent=parent)
            permit = self.model.permits.pop(start, None)
            if permit is None:
                return
            rec = self.store.recorder(run, branch=branch, parent=parent, permit=permit)
            STATS["permits used"] += 1
            with pytest.raises(GateError):  # used up
                self.store.recorder(run, branch=branch, parent=parent, permit=permit)
        else:
            rec = self.store.recorder(run, branch=branch, parent=parent)
        prev = rec.head
        assert prev == start
        # An AppendLog part: each checkpoint continues the chunk tree of the one before
        # (append_state.py), so a kept head's tree shares nodes and frames with swept ones.
        items = [] if prev is None else list(self.model.items[prev])
        log = AppendLog(items)
        for n in range(steps):
            self.tick += 1
            rec.observe(self.tick, "src", POOL[(k + n) % len(POOL)], pinned_at=1.0)
            log.append(POOL[(k + 2 * n) % len(POOL)] + b"%d" % self.tick)
            state = {"s": POOL[(k * 3 + n) % len(POOL)], "n": k % 3, "log": log}
            cid = rec.checkpoint(self.tick, state)
            self.model.items.setdefault(cid, list(log))
            self.model.parent.setdefault(cid, prev)
            STATS["checkpoints"] += 1
            self.model.stored.add(cid)
            self.model.refs[(run, branch)] = cid
            prev = cid
        rec.close()

    # -- rules ---------------------------------------------------------------

    @rule(
        run=st.sampled_from(RUNS),
        branch=st.sampled_from(BRANCHES),
        steps=st.integers(1, 3),
        k=st.integers(0, 7),
    )
    def record(self, run: str, branch: str, steps: int, k: int) -> None:
        if (run, branch) not in self.model.refs and branch != "main":
            return  # a new branch is a fork (below)
        self._record(run, branch, None, steps, k)

    @rule(run=st.sampled_from(RUNS), steps=st.integers(1, 3), k=st.integers(0, 7))
    def record_main(self, run: str, steps: int, k: int) -> None:
        """Recording is drawn twice as often: sweeps need history to take."""
        self._record(run, "main", None, steps, k)

    @precondition(lambda self: self.model.stored)
    @rule(
        branch=st.sampled_from(BRANCHES[1:]),
        i=st.integers(0, 99),
        k=st.integers(0, 7),
        run=st.sampled_from(RUNS),
    )
    def fork_record(self, branch: str, i: int, k: int, run: str) -> None:
        """A new branch forked from any stored checkpoint: of another run, refused."""
        cids = sorted(self.model.stored)
        parent = cids[i % len(cids)]
        if (run, branch) in self.model.refs:
            return
        if self.store.manifest(parent).run_id != run:
            with pytest.raises(InvalidInputError):
                self.store.recorder(run, branch=branch, parent=parent)
            return
        self._record(run, branch, parent, 1, k)

    @precondition(lambda self: self.model.stored)
    @rule(branch=st.sampled_from(BRANCHES[1:]), i=st.integers(0, 99))
    def fork(self, branch: str, i: int) -> None:
        cids = sorted(self.model.stored)
        cid = cids[i % len(cids)]
        run = self.store.manifest(cid).run_id
        if (run, branch) in self.model.refs:
            return
        self.store.fork(run, branch, cid)
        self.model.refs[(run, branch)] = cid

    @precondition(lambda self: self.model.refs)
    @rule(r=st.integers(0, 99), i=st.integers(0, 99), delete=st.booleans())
    def reset(self, r: int, i: int, delete: bool) -> None:
        refs = sorted(self.model.refs)
        run, branch = refs[r % len(refs)]
        old = self.model.refs[(run, branch)]
        mine = sorted(c for c in self.model.stored if self.store.manifest(c).run_id == run)
        new = None if delete or not mine else mine[i % len(mine)]
        rec = self.store.reset_ref(
            run, branch, new, expected_old=old, operator="op", reason="model"
        )
        if new is None:
            del self.model.refs[(run, branch)]
        else:
            self.model.refs[(run, branch)] = new
        if old != new:
            self.model.holds.setdefault(old, []).append(rec.digest)

    @precondition(lambda self: self.model.holds)
    @rule(i=st.integers(0, 99))
    def release(self, i: int) -> None:
        held = sorted(self.model.holds)
        cid = held[i % len(held)]
        audits = self.model.holds[cid]
        holder = audits[i % len(audits)]
        self.store.release_retained(cid, operator="op", reason="model", holder=holder)
        audits.remove(holder)
        if not audits:
            del self.model.holds[cid]

    @precondition(lambda self: self.model.refs)
    @rule(r=st.integers(0, 99), i=st.integers(0, 99))
    def move_forward(self, r: int, i: int) -> None:
        refs = sorted(self.model.refs)
        run, branch = refs[r % len(refs)]
        old = self.model.refs[(run, branch)]
        # a stored descendant of the head (the head itself included)
        below = [
            c
            for c in sorted(self.model.stored)
            if old in self.model.lineage(c, None) and self.store.manifest(c).run_id == run
        ]
        new = below[i % len(below)]
        self.store.set_ref(run, branch, new, expected_old=old)
        self.model.refs[(run, branch)] = new

    @precondition(lambda self: self.model.parent)
    @rule(i=st.integers(0, 99), verdict=st.sampled_from(sorted(VERDICTS)))
    def decide(self, i: int, verdict: str) -> None:
        """A decision about any checkpoint ever written (pruned ones too)."""
        cid = self._cids()[i % len(self._cids())]
        self.tick += 1
        body = {
            "decision_id": f"d{self.tick}",
            "recorded": {"checkpoint_id": cid, "run_id": "r", "branch": "main"},
            "mode": "strict",
            "findings": [{"code": c} for c in VERDICTS[verdict]],
            "verdict": verdict,
        }
        self.store.append_audit("decision", body)
        self.model.standing[cid] = verdict
        self.model.permits.pop(cid, None)  # given for the decision this one supersedes
        self.model.signed.discard(cid)

    @precondition(lambda self: self.model.standing)
    @rule(i=st.integers(0, 99))
    def sign_and_gate(self, i: int) -> None:
        cids = sorted(self.model.standing)
        cid = cids[i % len(cids)]
        verdict = self.model.standing[cid]
        with self.store.audit_view() as log:
            rec = log.latest_decision(cid)
        assert rec is not None and rec.body["verdict"] == verdict
        decision = rec.body["decision_id"]
        if verdict == "REJECT":
            with pytest.raises(GateError):
                resume_gate(self.store, cid, decision)
            return
        if verdict == "ACCEPT":
            resume_gate(self.store, cid, decision)
            return
        if cid in self.model.signed:
            with pytest.raises(SignOffError):  # one decision, one sign-off
                sign_off(self.store, decision, operator="op", reason="again")
            return
        so = sign_off(self.store, decision, operator="op", reason="model")
        self.model.signed.add(cid)
        with pytest.raises(GateError):  # a sign-off is needed
            resume_gate(self.store, cid, decision)
        permit = resume_gate(self.store, cid, decision, sign_off=so)
        with pytest.raises(SignOffError):  # the sign-off releases one resume
            resume_gate(self.store, cid, decision, sign_off=so)
        self.model.permits[cid] = permit.audit_digest

    @rule(k=st.integers(0, len(POOL) - 1), pin=st.booleans())
    def pin(self, k: int, pin: bool) -> None:
        data = POOL[k] + b"-pinned" if k % 2 else POOL[k]
        if pin:
            self.model.pinned.add(bytes(self.store.put_object(data)))
        elif self.model.pinned:
            key = sorted(self.model.pinned)[k % len(self.model.pinned)]
            assert self.store.unpin_object(key)
            self.model.pinned.discard(key)

    @rule(keep=st.integers(1, 3), run=st.none() | st.sampled_from(RUNS))
    def prune(self, keep: int, run: str | None) -> None:
        expected = self.model.sweep(keep, run)
        assert self.store.prune(keep_last=keep, run_id=run) == len(expected)

    @rule(keep=st.none() | st.integers(1, 3), run=st.sampled_from(RUNS))
    def gc(self, keep: int | None, run: str) -> None:
        has_refs = any(r == run for r, _ in self.model.refs)
        kw = {"keep_last": keep, "run_id": run} if keep else {"delete_run": run}
        if not has_refs:
            with pytest.raises(NotFoundError):
                self.store.gc(**kw)
            return
        dry = self.store.gc(**kw, dry_run=True)
        if keep is None:
            for ref in [ref for ref in self.model.refs if ref[0] == run]:
                del self.model.refs[ref]
            expected = self.model.sweep(None, None)
        else:
            expected = self.model.sweep(keep, run)
        real = self.store.gc(**kw)
        assert set(real.checkpoints) == expected
        # Never silently: each removed checkpoint the log holds a decision about is named,
        # and the sweep's gc record lists them.
        assert set(real.decided) == expected & set(self.model.standing)
        STATS["decided removed"] += len(real.decided)
        if real.decided:
            last = list(self.store.audit_records(kind="gc"))[-1]
            assert last.body["decided"] == list(real.decided)
        assert (dry.checkpoints, dry.objects_removed, dry.bytes_removed) == (
            real.checkpoints,
            real.objects_removed,
            real.bytes_removed,
        )

    @rule(run=st.sampled_from(RUNS))
    def delete_run(self, run: str) -> None:
        for ref in [ref for ref in self.model.refs if ref[0] == run]:
            del self.model.refs[ref]
        expected = self.model.sweep(None, None)
        assert self.store.delete_run(run) == len(expected)

    # -- what must hold ------------------------------------------------------

    @invariant()
    def refs_are_the_models(self) -> None:
        got = {
            (run, b): head
            for run in self.store.runs()
            for b, head in self.store.branches(run).items()
        }
        assert got == self.model.refs
        for (run, b), head in self.model.refs.items():
            want = self.model.lineage(head, None)
            assert [m.id for m in self.store.history(run, b)] == want

    @invariant()
    def retained_are_the_models(self) -> None:
        got = {cid: [h["audit"] for h in v["holds"]] for cid, v in self.store.retained().items()}
        assert got == self.model.holds

    @invariant()
    def stored_exactly_and_whole(self) -> None:
        for cid in self.model.parent:
            if cid in self.model.stored:
                assert self.store.verify_checkpoint(cid) == (), cid
            else:
                with pytest.raises(NotFoundError):
                    self.store.manifest(cid)
        for key in self.model.pinned:
            assert self.store.has_object(key)
        for head in set(self.model.refs.values()):
            with self.store.read(head) as cp:
                state = cp.state()
                assert isinstance(state, dict)
                assert list(state["log"]) == self.model.items[head]


def _settings(n: int) -> settings:
    return settings(
        max_examples=int(os.environ.get("R96_N", n)),
        stateful_step_count=25,
        deadline=None,
        derandomize=os.environ.get("R96_RANDOM") != "1",
        suppress_health_check=list(HealthCheck),
    )


@pytest.fixture
def lmdb_urls(tmp_path: Path) -> Iterator[Iterator[str]]:
    def urls() -> Iterator[str]:
        while True:
            yield tempfile.mkdtemp(dir=tmp_path) + "/s"

    yield urls()


def test_retention_matches_the_model_on_lmdb(lmdb_urls: Iterator[str]) -> None:
    """LMDB: every sweep keeps exactly what the model keeps, and it reads whole."""

    class OnLmdb(RetentionModel):
        def __init__(self) -> None:
            type(self).url = next(lmdb_urls)
            super().__init__()

    run_state_machine_as_test(OnLmdb, settings=_settings(40))
    if os.environ.get("R96_STATS"):
        print(dict(STATS))


def test_retention_matches_the_model_on_postgresql(pg_cluster: object) -> None:  # noqa: F811
    """PostgreSQL: the same model, each sequence on a new schema."""

    class OnPg(RetentionModel):
        def __init__(self) -> None:
            type(self).url = fresh_url()
            super().__init__()

    run_state_machine_as_test(OnPg, settings=_settings(12))
    if os.environ.get("R96_STATS"):
        print(dict(STATS))
