"""The chaos checker's rules added by the chaos4 audit bite (tests/chaos_errors.py,
tests/chaos_refs.py, the saver's logged branch in tests/chaos_roles.py).

Each ``*_is_reported`` test plants a log the checker before chaos4 accepted (or, for
the worker tests, runs the worker code that logged the wrong thing) and fails on it
there; each ``*_passes`` test pins a documented case the new rules must not flag
(seen in real chaos runs).
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from chaos_errors import Context, allowed
from chaos_log import Log, note_error
from chaos_roles import Roles
from chaos_worker import SHARED, Worker
from test_chaos_mutations import _fake_log, check

import cpstore
from cpstore.errors import NotFoundError
from cpstore.langgraph._read import entry_at

RUN, BRANCH = "own-w0", "f0_0_1"
REF = f"refs/{RUN}/{BRANCH}"


def _store(tmp_path: Path) -> tuple[cpstore.Store, str, str]:
    """A store with own-w0's main of two checkpoints and a fork branch at the first."""
    st = cpstore.open(tmp_path / "s")
    rec = st.recorder(RUN)
    first = rec.checkpoint(0, {"a": 1})
    second = rec.checkpoint(1, {"a": 2})
    st.fork(RUN, BRANCH, first)
    return st, first, second


def _refused(op: str, n: str, err: str, msg: str, **fields: Any) -> list[dict[str, Any]]:
    return [
        {"ev": "b", "op": op, "id": n, **fields},
        {"ev": "x", "op": op, "id": n, "err": err, "msg": msg},
    ]


class TestRefusalTable:
    def test_a_conflict_on_a_branch_nobody_races_is_reported(self, tmp_path: Path) -> None:
        """ConflictError for a checkpoint on the worker's own main, with no dropped batch
        in the log: nothing else moves that branch, so the refusal is wrong."""
        st, first, _ = _store(tmp_path)
        msg = f"the branch moved since this recorder read it; at refs/{RUN}/main"
        _fake_log(tmp_path / "logs", _refused(
            "ckpt", "1", "ConflictError", msg, run=RUN, branch="main", parent=first, sd="0" * 32,
        ))  # fmt: skip
        with st, pytest.raises(AssertionError, match="refusal not allowed: ckpt ConflictError"):
            check(st, tmp_path / "logs", final=True)

    def test_a_conflict_on_the_shared_run_passes(self, tmp_path: Path) -> None:
        """The same class naming the shared run's ref: every worker races there."""
        st, first, _ = _store(tmp_path)
        msg = f"the branch moved since this recorder read it; at refs/{SHARED}/main"
        _fake_log(tmp_path / "logs", _refused(
            "ckpt", "1", "ConflictError", msg, run=SHARED, branch="main", parent=first,
            sd="0" * 32,
        ))  # fmt: skip
        with st:
            check(st, tmp_path / "logs", final=True)

    def test_a_conflict_after_a_dropped_batch_passes(self, tmp_path: Path) -> None:
        """A batched flush's conflict on the own run after another commit of the process
        dropped a queued checkpoint of it (its recorder extends the dropped one)."""
        st, first, _ = _store(tmp_path)
        own = "the branch moved since this recorder read it; at refs/tmp-q/main"
        shared = f"the branch moved since this recorder read it; at refs/{SHARED}/main"
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "ckpt", "id": "1", "run": "tmp-q", "branch": "main",
             "parent": first, "sd": "0" * 32},
            *_refused("flush", "2", "ConflictError", shared),
            *_refused("flush", "3", "ConflictError", own),
        ])  # fmt: skip
        with st:
            check(st, tmp_path / "logs", final=True)

    def test_a_conflict_on_a_run_another_worker_deleted_passes(self, tmp_path: Path) -> None:
        """A short run's second checkpoint loses its CAS to another worker's delete_run
        (seed 1002 of the plain variant); the same conflict with no delete is reported."""
        st, first, _ = _store(tmp_path)
        msg = "the branch moved since this recorder read it; at refs/tmp-2/main"
        ck = {"run": "tmp-2", "branch": "main", "parent": first, "sd": "0" * 32}
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "delete", "id": "1", "run": "tmp-2"},
            {"ev": "a", "op": "delete", "id": "1", "run": "tmp-2"},
            *_refused("ckpt", "2", "ConflictError", msg, **ck),
        ])  # fmt: skip
        with st:
            check(st, tmp_path / "logs", final=True)
        _fake_log(tmp_path / "logs2", _refused("ckpt", "2", "ConflictError", msg, **ck))
        with (
            cpstore.open(tmp_path / "s") as st2,
            pytest.raises(AssertionError, match="ckpt ConflictError"),
        ):
            check(st2, tmp_path / "logs2", final=True)

    def test_a_gate_refusal_for_a_validated_checkpoint_passes(self, tmp_path: Path) -> None:
        """Recording on from a checkpoint whose standing decision is QUARANTINE needs a
        permit (GateError): allowed once the log shows its validation, else reported."""
        st, first, _ = _store(tmp_path)
        msg = f"the checkpoint's standing decision is QUARANTINE; at checkpoint {first}"
        err = {"ev": "err", "op": "fork_more", "err": "GateError", "msg": msg}
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "validate", "id": "1", "cid": first, "other": first}, err,
        ])  # fmt: skip
        with st:
            check(st, tmp_path / "logs", final=True)
        _fake_log(tmp_path / "logs2", [err])
        with (
            cpstore.open(tmp_path / "s") as st2,
            pytest.raises(AssertionError, match="fork_more GateError"),
        ):
            check(st2, tmp_path / "logs2", final=True)

    def test_a_sign_off_of_a_superseded_decision_passes_after_a_validation(
        self, tmp_path: Path
    ) -> None:
        """Validations race (seed 2001): a sign-off of a superseded decision is refused;
        with no validation of that checkpoint in the log it is reported."""
        st, first, _ = _store(tmp_path)
        msg = f"a later decision supersedes this one; at checkpoint {first}"
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "validate", "id": "1", "cid": first, "other": first},
            *_refused("signoff", "2", "SignOffError", msg, cid=first),
        ])  # fmt: skip
        with st:
            check(st, tmp_path / "logs", final=True)
        _fake_log(tmp_path / "logs2", _refused("signoff", "2", "SignOffError", msg, cid=first))
        with (
            cpstore.open(tmp_path / "s") as st2,
            pytest.raises(AssertionError, match="signoff SignOffError"),
        ):
            check(st2, tmp_path / "logs2", final=True)

    def test_a_connection_error_with_no_server_restart_is_reported(self, tmp_path: Path) -> None:
        """StoreConnectionError on a run whose server never restarted."""
        st, first, _ = _store(tmp_path)
        _fake_log(tmp_path / "logs", _refused(
            "validate", "1", "StoreConnectionError", "the connection to the server was lost",
            cid=first, other=first,
        ))  # fmt: skip
        with st, pytest.raises(AssertionError, match="validate StoreConnectionError"):
            check(st, tmp_path / "logs", final=True)

    def test_a_connection_error_across_a_server_restart_passes(self, tmp_path: Path) -> None:
        st, first, _ = _store(tmp_path)
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "validate", "id": "1", "cid": first, "other": first},
            {"ev": "b", "op": "restart", "id": "2"},
            {"ev": "x", "op": "validate", "id": "1", "err": "StoreConnectionError", "msg": "lost"},
            {"ev": "a", "op": "restart", "id": "2"},
        ])  # fmt: skip
        with st:
            check(st, tmp_path / "logs", final=True)

    def test_an_integrity_error_naming_another_ref_than_the_damaged_one_is_reported(
        self, tmp_path: Path
    ) -> None:
        """While the operator's damage of one ref stands, a refusal naming another ref
        (or an object) is not excused; one naming the damaged ref is."""
        st, _, _ = _store(tmp_path)
        damage = [{"ev": "b", "op": "damage", "id": "9", "run": RUN, "branch": BRANCH}]
        ok = _refused("prune", "1", "IntegrityError", f"ref damaged; at {REF}", keep=3, run=None)
        bad = _refused("prune", "2", "IntegrityError", f"ref damaged; at refs/{RUN}/main",
                       keep=3, run=None)  # fmt: skip
        _fake_log(tmp_path / "logs", [*damage, *ok])
        with st:
            check(st, tmp_path / "logs", final=True)
        _fake_log(tmp_path / "logs2", [*damage, *bad])
        with (
            cpstore.open(tmp_path / "s") as st2,
            pytest.raises(AssertionError, match="refusal not allowed: prune IntegrityError"),
        ):
            check(st2, tmp_path / "logs2", final=True)

    def test_a_second_release_of_one_head_passes_a_first_is_reported(self, tmp_path: Path) -> None:
        """release NotFoundError: documented when an earlier release took the head."""
        st, first, _ = _store(tmp_path)
        fields = {"run": RUN, "branch": BRANCH, "cid": first}
        msg = "no retained head with this id"
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "release", "id": "1", **fields},  # killed amid it: may have landed
            *_refused("release", "2", "NotFoundError", msg, **fields),
        ])  # fmt: skip
        with st:
            check(st, tmp_path / "logs", final=True)
        _fake_log(tmp_path / "logs2", _refused("release", "2", "NotFoundError", msg, **fields))
        with (
            cpstore.open(tmp_path / "s") as st2,
            pytest.raises(AssertionError, match="release NotFoundError"),
        ):
            check(st2, tmp_path / "logs2", final=True)

    def test_an_error_outside_a_logged_call_is_logged_and_judged(self, tmp_path: Path) -> None:
        """A CpstoreError a loop of the mix caught outside a logged call (a head read):
        logged as ``err`` (before: dropped unseen unless it ended the session), and a
        NotFoundError for a fork's recorder with no sweep behind it is reported."""
        logdir = tmp_path / "logs"
        logdir.mkdir()
        log = Log(str(logdir / "w0.log"), 0, 0)
        note_error(log, NotFoundError("no such branch", where=REF), "reset")
        rows = [json.loads(r) for r in (logdir / "w0.log").read_text().splitlines()]
        assert [(r["ev"], r["op"], r["err"]) for r in rows] == [("err", "reset", "NotFoundError")]
        st, _, _ = _store(tmp_path)
        with st, pytest.raises(AssertionError, match=r"reset NotFoundError .outside a logged call"):
            check(st, logdir, final=True)


class TestRefsAndSweeps:
    def test_an_acknowledged_fork_the_store_does_not_show_is_reported(self, tmp_path: Path) -> None:
        """An acked fork whose branch is elsewhere, and nothing in the log moved it."""
        st, _, second = _store(tmp_path)
        fields = {"run": RUN, "branch": BRANCH}
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "fork", "id": "1", **fields},
            {"ev": "a", "op": "fork", "id": "1", "cid": second, **fields},
        ])  # fmt: skip
        with st, pytest.raises(AssertionError, match="acknowledged fork not visible"):
            check(st, tmp_path / "logs", final=True)

    def test_a_fork_a_later_checkpoint_moved_passes(self, tmp_path: Path) -> None:
        """The branch's head is a checkpoint begun on it after the fork (its state's)."""
        st, first, _ = _store(tmp_path)
        head = st.recorder(RUN, branch=BRANCH).checkpoint(2, {"b": 1})
        sd = st.manifest(head).state_digest
        fields = {"run": RUN, "branch": BRANCH}
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "fork", "id": "1", **fields},
            {"ev": "a", "op": "fork", "id": "1", "cid": first, **fields},
            {"ev": "b", "op": "ckpt", "id": "2", "parent": first, "sd": sd, **fields},
        ])  # fmt: skip
        with st:
            check(st, tmp_path / "logs", final=True)

    def test_an_acknowledged_set_ref_the_store_does_not_show_is_reported(
        self, tmp_path: Path
    ) -> None:
        """An acked set_ref to ``second`` on the fork branch, which still holds ``first``."""
        st, first, second = _store(tmp_path)
        fields = {"run": RUN, "branch": BRANCH}
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "set_ref", "id": "1", **fields},
            {"ev": "a", "op": "set_ref", "id": "1", "old": first, "new": second, **fields},
        ])  # fmt: skip
        with st, pytest.raises(AssertionError, match="acknowledged set_ref not visible"):
            check(st, tmp_path / "logs", final=True)

    def test_a_set_ref_a_later_reset_undid_passes(self, tmp_path: Path) -> None:
        st, first, second = _store(tmp_path)
        fields = {"run": RUN, "branch": BRANCH}
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "set_ref", "id": "1", **fields},
            {"ev": "a", "op": "set_ref", "id": "1", "old": first, "new": second, **fields},
            {"ev": "b", "op": "reset", "id": "2", "old": second, "new": first, **fields},
        ])  # fmt: skip
        with st:
            check(st, tmp_path / "logs", final=True)

    def test_a_gc_that_reports_a_checkpoint_removed_that_is_stored_is_reported(
        self, tmp_path: Path
    ) -> None:
        st, first, _ = _store(tmp_path)
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "prune", "id": "1", "keep": 3, "run": None},
            {"ev": "a", "op": "prune", "id": "1", "removed": 1, "ids": [first]},
        ])  # fmt: skip
        with st, pytest.raises(AssertionError, match="removed; it is still stored"):
            check(st, tmp_path / "logs", final=True)

    def test_a_gc_whose_count_is_not_its_list_is_reported(self, tmp_path: Path) -> None:
        st, _, _ = _store(tmp_path)
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "prune", "id": "1", "keep": 3, "run": None},
            {"ev": "a", "op": "prune", "id": "1", "removed": 2, "ids": ["ab" * 16]},
        ])  # fmt: skip
        with st, pytest.raises(AssertionError, match="removed=2 but 1 ids"):
            check(st, tmp_path / "logs", final=True)

    def test_a_gc_that_removed_a_retained_head_or_an_unexplained_checkpoint_is_reported(
        self, tmp_path: Path
    ) -> None:
        """gc reports removing a head an acked reset retained (no release), and an acked
        checkpoint with no newer ones on its branch: neither may a sweep take."""
        st, _, _ = _store(tmp_path)
        gone = st.recorder("tmp-x").checkpoint(0, b"x")
        rec = st.reset_ref("tmp-x", "main", None, expected_old=gone, operator="o", reason="r")
        st.release_retained(gone, operator="o", reason="r")  # the store's own sweep: sound
        st.prune(keep_last=1)
        ck = {"run": "tmp-x", "branch": "main", "parent": None, "sd": "0" * 32}
        rs = {"run": "tmp-x", "branch": "main", "old": gone, "new": None}
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "ckpt", "id": "1", **ck},
            {"ev": "a", "op": "ckpt", "id": "1", "cid": gone, **ck},
            {"ev": "b", "op": "reset", "id": "2", **rs},
            {"ev": "a", "op": "reset", "id": "2", "digest": rec.digest, "index": rec.index, **rs},
            {"ev": "b", "op": "prune", "id": "3", "keep": 3, "run": None},
            {"ev": "a", "op": "prune", "id": "3", "removed": 1, "ids": [gone]},
        ])  # fmt: skip
        with st, pytest.raises(AssertionError) as got:
            check(st, tmp_path / "logs", final=True)
        assert "a retained head not released" in str(got.value)
        assert "that nothing in the log lets a sweep take" in str(got.value)


def test_a_saver_put_is_logged_on_the_branch_the_saver_recorded_on(tmp_path: Path) -> None:
    """A put whose parent is not its branch's head (the chain's head left behind, as after
    a put whose outcome was unknown landed) forks ``main@<id>``: the ack names that
    branch, as the saver's index entry does (before: "main", so the checker counted
    main's newer puts against the fork's checkpoint and over-excused its loss)."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    with cpstore.open(tmp_path / "s") as st:
        w = Worker(st, Log(str(logdir / "w0.log"), 0, 0), random.Random(1), "w0")
        roles = Roles(0, None)
        roles.bind(w)
        roles.lg_put()
        roles.lg_put()
        roles.lg_head = roles.lg_puts[0]  # the next put's parent is no longer the head
        roles.lg_put()
        acks = [
            json.loads(r)
            for r in (logdir / "w0.log").read_text().splitlines()
            if '"lgput"' in r and '"ev": "a"' in r
        ]
        with st.backend.read_txn() as txn:
            real = [entry_at(txn, st.backend.db("meta"), roles.thread, "", a["cid"]) for a in acks]
        assert [a["branch"] for a in acks] == [e.branch for e in real if e is not None]
        assert acks[0]["branch"] == "main" and acks[2]["branch"].startswith("main@")


def test_a_pool_wait_caught_outside_a_logged_call_is_dated_back_to_its_start() -> None:
    """A loop outside a logged call logs only when it caught the error: a pool wait
    that timed out 30 s after it began inside a restart is excused (ci2 met one), a
    lost connection caught that late is not, nor a wait that began after the restart."""
    s = 1_000_000_000
    ops = [
        (
            {"ev": "b", "op": "restart", "id": "2", "t": 0},
            {"ev": "a", "op": "restart", "id": "2", "t": 10 * s},
        )
    ]
    c = Context(ops)  # type: ignore[arg-type]

    def judged(msg: str, t: int) -> bool:
        e = {"ev": "err", "op": "racer", "err": "StoreConnectionError", "msg": msg, "t": t}
        return allowed({"op": "racer", "t": t, "id": "-"}, e, c)

    wait = "no connection to the server within 30 s; at postgresql://x"
    assert judged(wait, 38 * s)  # began at 8 s, inside the restart
    assert not judged(wait, 60 * s)  # began at 30 s: 20 s after the restart ended
    assert not judged("the connection to the server was lost", 38 * s)
    assert judged("the connection to the server was lost", 12 * s)  # within the slack


def test_a_damage_that_found_its_fork_deleted_passes_and_otherwise_is_reported() -> None:
    """The operator picks a fork, then flips its ref; a worker's reset of that fork to None
    begun before the repair may land first, and the repair then says "no such ref"
    (NotFoundError). Allowed when the log shows such a delete that may have committed;
    reported without one, or when the delete was refused (seen: pg-variant, 2026-12-05)."""
    damage_b = {"ev": "b", "op": "damage", "id": "99.0.1", "run": RUN, "branch": BRANCH, "t": 20}
    damage_x = {"ev": "x", "op": "damage", "id": "99.0.1", "err": "NotFoundError", "t": 40}
    reset_b = {"ev": "b", "op": "reset", "id": "1.0.1", "run": RUN, "branch": BRANCH,
               "new": None, "t": 10}  # fmt: skip
    reset_a = {"ev": "a", "op": "reset", "id": "1.0.1", "t": 30}
    reset_x = {"ev": "x", "op": "reset", "id": "1.0.1", "err": "ConflictError", "t": 30}
    assert allowed(damage_b, damage_x, Context([(reset_b, reset_a), (damage_b, damage_x)]))
    assert allowed(damage_b, damage_x, Context([(reset_b, None), (damage_b, damage_x)]))
    assert not allowed(damage_b, damage_x, Context([(damage_b, damage_x)]))
    assert not allowed(damage_b, damage_x, Context([(reset_b, reset_x), (damage_b, damage_x)]))
    late = {**reset_b, "t": 50}
    assert not allowed(damage_b, damage_x, Context([(late, reset_a), (damage_b, damage_x)]))
