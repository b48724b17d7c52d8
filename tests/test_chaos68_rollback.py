"""The chaos checker's rules for a ref put back to an older head with a true check (chaos68).

tests/chaos_rollback.py's operator rolls a ``main`` ref back behind cpstore's back (the
ref passes its own check; the refs table fails ``meta/refs_digest``) and repairs it with
``repair_ref`` to the true head. Each ``*_is_reported`` test plants what a store defect
would leave (a sweep by the rolled-back table, done here with retention's digest check
switched off; a refusal or an answer nothing in the log explains) and shows the checker
fails on it; the first shows the checker before chaos68 passed it (the side chain the
workers recorded on the older head counted as "newer" checkpoints, excusing the sweep).
Each ``*_passes`` test pins the documented case the rules must allow.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import chaos_check
import chaos_rollback
import pytest
from chaos_check import Model, may_have_committed, read_logs
from chaos_errors import Context, allowed
from chaos_log import Log
from chaos_names import names_hold
from chaos_roles import Roles
from chaos_rollback import probe, repair, roll_back
from chaos_worker import Worker
from test_chaos_mutations import check

import cpstore
from cpstore.errors import NotFoundError
from cpstore.store import retention
from cpstore.store.refs import unpack_ref

RUN = "own-w0"
REF = f"refs/{RUN}/main"


class _Oldest(random.Random):
    """Picks the last of a sequence: roll back to the oldest head offered (``H~2``)."""

    def choice(self, seq: Any) -> Any:
        return seq[-1]


def _checkpoints(st: cpstore.Store, log: Log, n: int, i0: int = 0) -> list[str]:
    """``n`` checkpoints on RUN's main, logged as a worker logs them."""
    rec, out = st.recorder(RUN), []
    for i in range(i0, i0 + n):
        state = {"i": i}
        f = {"run": RUN, "branch": "main", "parent": rec.head, "sd": cpstore.state_digest(state)}
        oid = log.op()
        log.write("b", sync=False, op="ckpt", id=oid, **f)
        cid = rec.checkpoint(i, state)
        log.write("a", sync=False, op="ckpt", id=oid, cid=cid, **f)
        out.append(cid)
    return out


def _rolled_back(tmp_path: Path) -> tuple[cpstore.Store, Log, Log, list[str], list[str]]:
    """RUN's main: O, H1, H; rolled back to O by the operator; a side chain C1..C3 on O."""
    logs = tmp_path / "logs"
    logs.mkdir()
    st = cpstore.open(tmp_path / "s")
    worker, operator = Log(str(logs / "w0.log"), 0, 0), Log(str(logs / "w99.log"), 99, 0)
    line = _checkpoints(st, worker, 3)
    assert roll_back(st, operator, RUN, _Oldest()) == (line[2], line[0])
    assert st.ref(RUN) == line[0]  # its own check holds
    side = _checkpoints(st, worker, 3, 3)
    return st, worker, operator, line, side


def _lax_heads(txn: Any, dbs: Any) -> list[tuple[bytes, bytes]]:
    """Retention's heads without the refs digest: the defect the rule must catch."""
    with txn.cursor(db=dbs["refs"]) as cur:
        return [(bytes(k), unpack_ref(k, v)[0]) for k, v in cur]


class TestRetentionWhileRolledBack:
    def test_a_sweep_by_the_rolled_back_table_is_reported(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A store that swept by the rolled-back ref (gc acknowledged, O, H1 and H gone):
        reported as a sweep while the digest failed and as lost acknowledged checkpoints."""
        st, _, operator, line, side = _rolled_back(tmp_path)
        with monkeypatch.context() as m:
            m.setattr(retention, "checked_heads", _lax_heads)
            probe(st, operator)  # the defective store acknowledges the sweep
        for cid in line:  # O, H1 and H: all newer than nothing the rolled-back ref reached
            with pytest.raises(NotFoundError):
                st.manifest(cid)
        repair(st, operator, RUN, side[-1])  # the true head is gone: the operator keeps C3
        with st, pytest.raises(AssertionError) as info:
            check(st, tmp_path / "logs", final=True)
        assert f"ran while {REF} stood rolled back" in str(info.value)
        assert "acknowledged checkpoint lost" in str(info.value)

    def test_the_checker_before_chaos68_missed_the_sweep(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The same log passes the checker without the rules: the side chain's three
        checkpoints counted as newer than H (keep_last=3), and nothing looked at retention
        acknowledged while the digest failed."""
        st, _, operator, _, side = _rolled_back(tmp_path)
        with monkeypatch.context() as m:
            m.setattr(retention, "checked_heads", _lax_heads)
            probe(st, operator)
        repair(st, operator, RUN, side[-1])
        newer = chaos_check.Model.newer

        def counted_side(self: Model, *args: Any) -> int:
            kept, self.side = self.side, set()
            try:
                return newer(self, *args)
            finally:
                self.side = kept

        monkeypatch.setattr(chaos_check.Model, "newer", counted_side)
        monkeypatch.setattr(chaos_rollback, "retention_problems", lambda m: [])
        with st:
            check(st, tmp_path / "logs", final=True)

    def test_retention_refused_while_rolled_back_then_repaired_passes(self, tmp_path: Path) -> None:
        """The store's behaviour: the operator's sweep refused (meta/refs_digest), the repair
        to the true head retains the side chain's head; every checkpoint stays."""
        st, _, operator, line, side = _rolled_back(tmp_path)
        probe(st, operator)
        repair(st, operator, RUN, line[-1])
        with st:
            assert st.ref(RUN) == line[-1] and side[-1] in st.retained()
            check(st, tmp_path / "logs", final=True)
            rows = Model(read_logs(tmp_path / "logs"))
            x = next(e for b, e in rows.ops if b.get("probe"))
            assert x is not None and x["err"] == "IntegrityError" and "refs_digest" in x["msg"]
            assert st.prune(keep_last=3) == 0  # retention runs again (the side chain retained)


# -- refusals and answers while the ref stood rolled back (planted logs) ----------------

_ROLL = [
    ({"t": 10, "op": "ckpt", "id": "1", "run": RUN, "branch": "main", "parent": None},
     {"t": 11, "ev": "a", "cid": "o" * 32}),
    ({"t": 12, "op": "ckpt", "id": "2", "run": RUN, "branch": "main", "parent": "o" * 32},
     {"t": 13, "ev": "a", "cid": "h" * 32}),
    ({"t": 20, "op": "rollback", "id": "9", "run": RUN, "branch": "main", "old": "h" * 32,
      "new": "o" * 32}, {"t": 21, "ev": "a", "written": True}),
    ({"t": 30, "op": "ckpt", "id": "3", "run": RUN, "branch": "main", "parent": "o" * 32},
     {"t": 31, "ev": "a", "cid": "c" * 32}),
    ({"t": 40, "op": "ref_repair", "id": "10", "run": RUN, "branch": "main", "new": "h" * 32},
     {"t": 41, "ev": "a"}),
]  # fmt: skip


def _ops(rolled: bool) -> list[tuple[dict[str, Any], dict[str, Any] | None]]:
    ops = _ROLL if rolled else _ROLL[:2]
    for b, e in ops:
        e.update(op=b["op"], id=b["id"], w=0, inc=0)
        b.update(ev="b", w=0, inc=0)
    return [(dict(b), dict(e)) for b, e in ops]


def _refusal(op: str, t0: int, t1: int, err: str, msg: str, **f: Any) -> tuple[Any, Any]:
    return (
        {"ev": "b", "op": op, "id": "r", "t": t0, "w": 0, "inc": 0, **f},
        {"ev": "x", "op": op, "id": "r", "t": t1, "w": 0, "inc": 0, "err": err, "msg": msg},
    )


DIGEST_MSG = "refs table does not match its digest ...; at meta/refs_digest; expected ..."
CONFLICT = f"the branch moved since this recorder read it; at {REF}; expected ..."


class TestRefusals:
    @pytest.mark.parametrize(
        ("rolled", "op", "t0", "t1", "ok"),
        [
            (True, "prune", 22, 25, True),  # retention refuses while the digest fails
            (True, "delete", 39, 45, True),  # overlapping the repair
            (True, "dry_run", 22, 25, True),
            (False, "prune", 22, 25, False),  # no rollback: the digest held
            (True, "prune", 50, 51, False),  # begun after the repair: the digest held
            (True, "ckpt", 22, 25, False),  # checkpoints keep working while rolled back
            (True, "fork", 22, 25, False),
            (True, "reset", 22, 25, False),
        ],
    )
    def test_a_refs_digest_refusal(self, rolled: bool, op: str, t0: int, t1: int, ok: bool) -> None:
        ops = _ops(rolled)
        b, e = _refusal(op, t0, t1, "IntegrityError", DIGEST_MSG, run=RUN, branch="main")
        assert allowed(b, e, Context([*ops, (b, e)])) is ok

    @pytest.mark.parametrize(
        ("rolled", "t0", "t1", "parent", "ok"),
        [
            (True, 15, 22, "h" * 32, True),  # a recorder on the true head meets the rollback
            (True, 50, 51, "c" * 32, True),  # after the repair, one on the side chain
            (True, 50, 51, "o" * 32, True),  # ... or on the older head
            (True, 50, 51, "h" * 32, False),  # after the repair on the true head: wrong
            (False, 15, 22, "h" * 32, False),  # nothing moved that branch
        ],
    )
    def test_a_conflict_on_the_rolled_back_branch(
        self, rolled: bool, t0: int, t1: int, parent: str, ok: bool
    ) -> None:
        ops = _ops(rolled)
        b, e = _refusal("ckpt", t0, t1, "ConflictError", CONFLICT, run=RUN, branch="main",
                        parent=parent)  # fmt: skip
        assert allowed(b, e, Context([*ops, (b, e)])) is ok

    @pytest.mark.parametrize(("queued_on", "ok"), [("o" * 32, True), ("h" * 32, False)])
    def test_a_batched_conflict_after_the_repair(self, queued_on: str, ok: bool) -> None:
        """Batched: C1 queued on the older head during the rollback (never acknowledged),
        C2 queued on C1 after the repair fills the batch, whose commit conflicts: the
        ckpt call's own parent is C1, unacknowledged, so only the queue explains it (the
        first rule flagged it). Queued on the true head instead, nothing does."""
        ops = _ops(True)
        c1 = {"ev": "b", "op": "ckpt", "id": "q1", "t": 35, "w": 0, "inc": 0, "run": RUN,
              "branch": "main", "parent": queued_on}  # fmt: skip
        b, e = _refusal("ckpt", 50, 51, "ConflictError", CONFLICT, run=RUN, branch="main",
                        parent="1" * 32)  # fmt: skip
        assert allowed(b, e, Context([*ops, (c1, None), (b, e)])) is ok

    @pytest.mark.parametrize(("rolled", "ok"), [(True, True), (False, False)])
    def test_a_workers_repair_goes_on_only_while_rolled_back(self, rolled: bool, ok: bool) -> None:
        """The worker's repair_ref of its intact main, to a target nothing stores: past the
        digest check (NotFoundError) only while the table failed its digest."""
        ops = _ops(rolled)
        b, e = _refusal("repair", 22, 25, "NotFoundError", "no checkpoint", run=RUN)
        assert allowed(b, e, Context([*ops, (b, e)])) is ok


class TestAnswers:
    def _store(self, tmp_path: Path) -> tuple[cpstore.Store, list[str]]:
        st, _, operator, line, _ = _rolled_back(tmp_path)
        repair(st, operator, RUN, line[-1])
        return st, line

    def _resolve(self, st: cpstore.Store, logs: Path, cid: str, *, after: bool) -> list[str]:
        """Problems names_hold finds with an acknowledged resolve of RUN@main naming ``cid``,
        logged after the repair, or dated inside the rollback (``after`` False)."""
        log = Log(str(logs / "w1.log"), 1, 0)
        if after:
            oid = log.op()
            log.write("b", sync=False, op="resolve", id=oid, run=RUN, branch="main", n=0)
            log.write("a", sync=False, op="resolve", id=oid, cid=cid, run=RUN, branch="main", n=0)
        m = Model(read_logs(logs))
        if not after:
            (r,) = m.rollbacks
            b = {"ev": "b", "op": "resolve", "id": "1.0.1", "run": RUN, "branch": "main", "n": 0,
                 "t": r.written + 1, "w": 1, "inc": 0}  # fmt: skip
            a = {"ev": "a", "op": "resolve", "id": "1.0.1", "cid": cid, "t": r.written + 2}
            m.ops.append((b, a))
            m.acks.append((b, a))
        return names_hold(st, m, may_have_committed)

    def test_a_resolve_answering_the_older_head_while_rolled_back_passes(
        self, tmp_path: Path
    ) -> None:
        st, line = self._store(tmp_path)
        with st:
            assert self._resolve(st, tmp_path / "logs", line[0], after=False) == []

    def test_a_resolve_answering_the_older_head_after_the_repair_is_reported(
        self, tmp_path: Path
    ) -> None:
        """A stale read of the rolled-back ref once the repair was acknowledged."""
        st, line = self._store(tmp_path)
        with st:
            problems = self._resolve(st, tmp_path / "logs", line[0], after=True)
            assert problems and f"named {line[0]}" in problems[0]

    def test_two_side_children_of_the_older_head_are_a_bypassed_cas(self, tmp_path: Path) -> None:
        """The side chain may give the older head a second child, not a third: two
        acknowledged side-chain children of one parent in one rollback are a bypassed CAS."""
        st, _, operator, line, side = _rolled_back(tmp_path)
        repair(st, operator, RUN, line[-1])
        lines = read_logs(tmp_path / "logs")
        with st:
            assert chaos_check.cas_linear(st, Model(lines), final=True) == []
            b = next(r for r in lines if r["ev"] == "b" and r["id"] == "0.0.4")  # C1's
            a = next(r for r in lines if r["ev"] == "a" and r.get("cid") == side[0])
            twin = [dict(b, id="0.0.99", t=b["t"] + 1), dict(a, id="0.0.99", cid="d" * 32)]
            found = chaos_check.cas_linear(st, Model(lines + twin), final=False)
            assert any("CAS was bypassed" in p for p in found)


# -- two false alarms of the first rules, seen in the campaign's third round -------------


def _lines(rows: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[dict[str, Any]]:
    out = []
    for b, e in rows:
        out.append({"ev": "b", "w": 0, "inc": 0, **b})
        out.append({"ev": "a", "w": 0, "inc": 0, "op": b["op"], "id": b["id"], **e})
    return sorted(out, key=lambda r: r["t"])


class TestFirstRulesFalseAlarms:
    @pytest.mark.parametrize(("ends", "ok"), [(25, True), (18, False)])
    def test_a_stale_recorder_on_the_older_head_lands_after_the_write(
        self, tmp_path: Path, ends: int, ok: bool
    ) -> None:
        """pg-68006 (shared run): a CAS begun on O before the rollback (its recorder read O
        before H landed) found O again after the write and landed: a side child of O,
        though begun before the rollback (the first rule took it for a second child on the
        true head's line: "a CAS was bypassed"). Ended before the rollback, it is one."""
        o, h, s = "o" * 32, "h" * 32, "s" * 32
        sd = {"branch": "main", "run": "shared", "sd": "0" * 32}
        lines = _lines([
            ({"t": 10, "op": "ckpt", "id": "1", "parent": None, **sd}, {"t": 11, "cid": o}),
            ({"t": 12, "op": "ckpt", "id": "2", "parent": o, **sd}, {"t": 13, "cid": h}),
            ({"t": 15, "op": "ckpt", "id": "3", "parent": o, **sd}, {"t": ends, "cid": s}),
            ({"t": 20, "op": "rollback", "id": "9", "run": "shared", "branch": "main", "old": h,
              "new": o, "line": [h]}, {"t": 21, "written": True}),
            ({"t": 40, "op": "ref_repair", "id": "10", "run": "shared", "branch": "main",
              "new": h}, {"t": 41}),
        ])  # fmt: skip
        with cpstore.open(tmp_path / "s") as st:  # not read: final=False
            found = chaos_check.cas_linear(st, Model(lines), final=False)
        assert (found == []) is ok

    def test_a_saver_prune_sweeping_a_released_fork_head_passes(self, tmp_path: Path) -> None:
        """crash-68005: a fork branch reset away, its head released, then a saver's prune
        (or delete) of another thread: its sweep takes every checkpoint nothing keeps
        (docs/store.md, Retention), the released head too; the first rules excused that
        for prune and delete_run only ("acknowledged checkpoint lost")."""
        logs = tmp_path / "logs"
        logs.mkdir()
        st = cpstore.open(tmp_path / "s")
        log = Log(str(logs / "w0.log"), 0, 0)
        base = _checkpoints(st, log, 1)[0]
        w = Worker(st, log, random.Random(1), "w0")
        w.acked_main = [base]
        w.op_fork()
        (branch,) = w.forks
        head = st.ref(RUN, branch)
        oid = log.op()
        log.write("b", sync=True, op="reset", id=oid, run=RUN, branch=branch, old=head, new=None)
        rec = st.reset_ref(RUN, branch, None, expected_old=head, operator="o", reason="r")
        log.write("a", sync=True, op="reset", id=oid, run=RUN, branch=branch, old=head,
                  new=None, digest=rec.digest, index=rec.index)  # fmt: skip
        w.retained = [(str(head), branch, rec.digest)]
        w.op_release()
        roles = Roles(1, None)
        roles.bind(w)
        roles.lg_old = ["lg-w0-0"]
        old = Roles(0, None)
        old.bind(w)
        for _ in range(2):
            old.lg_put()
        w.rng = random.Random(3)
        roles.lg_maintain()
        assert any(b["op"] in ("lgprune", "lgdelete") for b, _ in Model(read_logs(logs)).acks)
        with st:
            with pytest.raises(NotFoundError):
                st.manifest(str(head))
            check(st, logs, final=True)

    def test_a_checkpoint_queued_long_before_a_rollback_still_counts_as_newer(self) -> None:
        """crash-68011: a batched checkpoint queued on the head 6 s before a rollback to
        that head, never acknowledged (it may have landed), counts as newer on the true
        line: a gc keeping 4 may take the one 4 back (the pg-68006 rule made it a side
        child, and the sweep "nothing in the log lets a sweep take")."""
        c = [f"{i}" * 32 for i in range(1, 6)]
        sd = {"branch": "main", "run": RUN, "sd": "0" * 32}
        lines = _lines([
            ({"t": 10 + 2 * i, "op": "ckpt", "id": f"c{i}", "parent": c[i - 1] if i else None,
              **sd}, {"t": 11 + 2 * i, "cid": c[i], **sd})
            for i in range(5)
        ] + [
            ({"t": 30, "op": "prune", "id": "p", "keep": 4, "run": None}, {"t": 31, "ids": []}),
            ({"t": 50, "op": "rollback", "id": "9", "run": RUN, "branch": "main", "old": "h" * 32,
              "new": c[4], "line": ["h" * 32]}, {"t": 51, "written": True}),
            ({"t": 60, "op": "ref_repair", "id": "10", "run": RUN, "branch": "main",
              "new": "h" * 32}, {"t": 61}),
        ])  # fmt: skip
        lines.append({"ev": "b", "w": 0, "inc": 0, "t": 20, "op": "ckpt", "id": "q",
                      "parent": c[4], **sd})  # fmt: skip
        m = Model(sorted(lines, key=lambda r: r["t"]))
        (b, a) = next((b, a) for b, a in m.acked("ckpt") if a["cid"] == c[1])
        assert m.side == set() and m.removable(a, b)
