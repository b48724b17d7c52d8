"""The chaos checker's reads by name bite (tests/chaos_names.py, chaos67).

Each ``*_is_reported`` test plants the log a wrong ``resolve("RUN@BRANCH~N")`` would
leave (a checkpoint off the branch or at another depth, a head already replaced when
the call began, a refusal of a branch that existed or of a chain long enough) and
fails on the checker before chaos67, which never looked at a resolve; each
``*_passes`` test pins a case the rule must allow (a head moved during the call, a
reset back, a branch deleted, a short chain, a checkpoint begun and never acknowledged).
The last test runs the worker's own op against a store and checks what it logged.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from chaos_log import Log
from chaos_names import resolve_by_name
from chaos_worker import CONTESTED, SHARED, Worker
from test_chaos_mutations import _fake_log, check

import cpstore
from cpstore.errors import NotFoundError

RUN = "own-w0"


def _chain(tmp_path: Path, n: int = 3) -> tuple[cpstore.Store, list[dict[str, Any]], list[str]]:
    """own-w0's main of ``n`` checkpoints, and the log lines that acknowledged them."""
    st = cpstore.open(tmp_path / "s")
    rec = st.recorder(RUN)
    lines: list[dict[str, Any]] = []
    ids: list[str] = []
    for i in range(n):
        parent = rec.head
        cid = rec.checkpoint(i, {"a": i})
        sd = st.manifest(cid).state_digest
        f = {"run": RUN, "branch": "main", "parent": parent, "sd": sd}
        lines += [
            {"ev": "b", "op": "ckpt", "id": f"c{i}", **f},
            {"ev": "a", "op": "ckpt", "id": f"c{i}", "cid": cid, **f},
        ]
        ids.append(cid)
    return st, lines, ids


def _resolve(n: int, cid: str, *, run: str = RUN, oid: str = "r") -> list[dict[str, Any]]:
    f = {"run": run, "branch": "main", "n": n}
    return [
        {"ev": "b", "op": "resolve", "id": oid, "name": f"{run}@main~{n}", **f},
        {"ev": "a", "op": "resolve", "id": oid, "cid": cid, **f},
    ]


def _refused(n: int, msg: str, *, run: str = RUN) -> list[dict[str, Any]]:
    f = {"run": run, "branch": "main", "n": n}
    return [
        {"ev": "b", "op": "resolve", "id": "r", "name": f"{run}@main~{n}", **f},
        {"ev": "x", "op": "resolve", "id": "r", "err": "NotFoundError", "msg": msg},
    ]


class TestResolvedIds:
    def test_an_id_at_another_depth_is_reported(self, tmp_path: Path) -> None:
        """~1 of a chain c0 <- c1 <- c2 is c1; the log says the store answered c0."""
        st, lines, (c0, _, _) = _chain(tmp_path)
        _fake_log(tmp_path / "logs", lines + _resolve(1, c0))
        with st, pytest.raises(AssertionError, match="not a checkpoint the log shows at ~1"):
            check(st, tmp_path / "logs", final=True)

    def test_the_right_depth_passes(self, tmp_path: Path) -> None:
        """~1 is c1, ~2 is c0 (parents from the store's manifests)."""
        st, lines, (c0, c1, _) = _chain(tmp_path)
        _fake_log(tmp_path / "logs", lines + _resolve(1, c1) + _resolve(2, c0, oid="r2"))
        with st:
            check(st, tmp_path / "logs", final=True)

    def test_an_id_of_another_run_is_reported(self, tmp_path: Path) -> None:
        """~0 of own-w0 answered with the head of another run (a name read the wrong way)."""
        st, lines, _ = _chain(tmp_path)
        other = st.recorder("own-w1").checkpoint(0, {"b": 1})
        _fake_log(tmp_path / "logs", lines + _resolve(0, other))
        with st, pytest.raises(AssertionError, match="not a checkpoint the log shows at ~0"):
            check(st, tmp_path / "logs", final=True)

    def test_a_head_replaced_before_the_call_began_is_reported(self, tmp_path: Path) -> None:
        """c2 was acknowledged before the resolve began: ~0 answering c1 is a stale read."""
        st, lines, (_, c1, _) = _chain(tmp_path)
        _fake_log(tmp_path / "logs", lines + _resolve(0, c1))
        with st, pytest.raises(AssertionError, match="not a checkpoint the log shows at ~0"):
            check(st, tmp_path / "logs", final=True)

    def test_a_head_moved_during_the_call_passes(self, tmp_path: Path) -> None:
        """c2 was begun before the resolve and acknowledged after it: c1 or c2 is right."""
        st, lines, (_, c1, _) = _chain(tmp_path)
        b, e = _resolve(0, c1)
        _fake_log(tmp_path / "logs", [*lines[:5], b, lines[5], e])
        with st:
            check(st, tmp_path / "logs", final=True)

    def test_a_head_a_reset_put_back_passes(self, tmp_path: Path) -> None:
        """A contested-style reset back to c0 (acknowledged) before the call: ~0 is c0."""
        st, lines, (c0, _, c2) = _chain(tmp_path)
        rec = st.reset_ref(RUN, "main", c0, expected_old=c2, operator="o", reason="r")
        reset = {"run": RUN, "branch": "main", "old": c2, "new": c0}
        lines += [
            {"ev": "b", "op": "reset", "id": "s", **reset},
            {"ev": "a", "op": "reset", "id": "s", **reset, "digest": rec.digest, "index": 0},
        ]
        _fake_log(tmp_path / "logs", lines + _resolve(0, c0))
        with st:
            problems = [p for p in _problems(st, tmp_path) if "resolve" in p]
        assert problems == []

    def test_a_begun_checkpoint_never_acknowledged_passes(self, tmp_path: Path) -> None:
        """c2's ack was never written (killed after the commit): matched by what was begun."""
        st, lines, (_, _, c2) = _chain(tmp_path)
        _fake_log(tmp_path / "logs", lines[:5] + _resolve(0, c2))
        with st:
            check(st, tmp_path / "logs", final=True)


class TestRefusals:
    def test_no_such_branch_of_a_branch_that_existed_is_reported(self, tmp_path: Path) -> None:
        """own-w0@main was acknowledged before the call and nothing deleted it."""
        st, lines, _ = _chain(tmp_path)
        refused = _refused(0, f"no such run or branch; at {RUN}@main")
        _fake_log(tmp_path / "logs", lines + refused)
        with st, pytest.raises(AssertionError, match="refusal not allowed: resolve NotFound"):
            check(st, tmp_path / "logs", final=True)

    def test_no_such_branch_after_a_reset_to_none_passes(self, tmp_path: Path) -> None:
        """The contested run reset away (new=None) before the call: no such branch."""
        st, lines, _ = _chain(tmp_path)
        reset = {"run": CONTESTED, "branch": "main", "old": "ab" * 16, "new": None}
        lines += [
            {"ev": "b", "op": "reset", "id": "s", **reset},
            {"ev": "x", "op": "reset", "id": "s", "err": "StoreConnectionError", "msg": "-"},
            {"ev": "b", "op": "restart", "id": "z"},
            {"ev": "a", "op": "restart", "id": "z"},
        ]
        refused = _refused(0, f"no such run or branch; at {CONTESTED}@main", run=CONTESTED)
        _fake_log(tmp_path / "logs", lines + refused)
        with st:
            problems = [p for p in _problems(st, tmp_path) if "resolve" in p]
        assert problems == []

    def test_no_such_branch_beside_a_dropped_batched_checkpoint_passes(
        self, tmp_path: Path
    ) -> None:
        """Seed 67204 (PostgreSQL): the shared run's first checkpoints were queued (``b``,
        never acknowledged: their flushes lost the race) before the call; nothing had set
        the branch for sure, so "no such run or branch" is right. The first rule took a
        begun checkpoint for a set branch and reported it."""
        st, lines, _ = _chain(tmp_path)
        queued = {"run": SHARED, "branch": "main", "parent": None, "sd": "0" * 32}
        msg = f"the branch moved since this recorder read it; at refs/{SHARED}/main"
        lines += [
            {"ev": "b", "op": "ckpt", "id": "q", **queued},
            {"ev": "b", "op": "flush", "id": "f"},
            {"ev": "x", "op": "flush", "id": "f", "err": "ConflictError", "msg": msg},
        ]
        refused = _refused(0, f"no such run or branch; at {SHARED}@main", run=SHARED)
        _fake_log(tmp_path / "logs", lines + refused)
        with st:
            problems = [p for p in _problems(st, tmp_path) if "resolve" in p]
        assert problems == []

    def test_no_such_branch_after_a_deletion_and_a_new_root_is_reported(
        self, tmp_path: Path
    ) -> None:
        """A reset to None, then a root checkpoint acknowledged, both before the call: the
        branch stood again for the whole call, the deletion does not excuse the refusal."""
        st, lines, (c0, _, c2) = _chain(tmp_path)
        reset = {"run": RUN, "branch": "main", "old": c2, "new": None}
        lines += [
            {"ev": "b", "op": "reset", "id": "s", **reset},
            {"ev": "x", "op": "reset", "id": "s", "err": "StoreConnectionError", "msg": "-"},
            {"ev": "b", "op": "restart", "id": "z"},
            {"ev": "a", "op": "restart", "id": "z"},
            {"ev": "b", "op": "ckpt", "id": "n", "run": RUN, "branch": "main", "parent": None,
             "sd": st.manifest(c0).state_digest},
            {"ev": "a", "op": "ckpt", "id": "n", "cid": c0, "run": RUN, "branch": "main",
             "parent": None, "sd": st.manifest(c0).state_digest},
        ]  # fmt: skip
        _fake_log(tmp_path / "logs", lines + _refused(0, f"no such run or branch; at {RUN}@main"))
        with st, pytest.raises(AssertionError, match="refusal not allowed: resolve NotFound"):
            check(st, tmp_path / "logs", final=True)

    def test_no_ancestor_on_a_long_enough_chain_is_reported(self, tmp_path: Path) -> None:
        """~2 of a chain of 3 exists: "no ancestor 2 back" is wrong."""
        st, lines, _ = _chain(tmp_path)
        _fake_log(tmp_path / "logs", lines + _refused(2, f"{RUN}@main has no ancestor 2 back"))
        with st, pytest.raises(AssertionError, match="refusal not allowed: resolve NotFound"):
            check(st, tmp_path / "logs", final=True)

    def test_no_ancestor_on_a_short_chain_passes(self, tmp_path: Path) -> None:
        """~3 of a chain of 3 does not exist."""
        st, lines, _ = _chain(tmp_path)
        _fake_log(tmp_path / "logs", lines + _refused(3, f"{RUN}@main has no ancestor 3 back"))
        with st:
            check(st, tmp_path / "logs", final=True)

    def test_a_pruned_ancestor_without_a_sweep_is_reported(self, tmp_path: Path) -> None:
        """ "checkpoint was pruned" with no prune, gc or delete in the log."""
        st, lines, _ = _chain(tmp_path)
        _fake_log(tmp_path / "logs", lines + _refused(2, "checkpoint was pruned; at c0"))
        with st, pytest.raises(AssertionError, match="refusal not allowed: resolve NotFound"):
            check(st, tmp_path / "logs", final=True)


def _problems(st: cpstore.Store, tmp_path: Path) -> list[str]:
    """check()'s problems (empty when it passes)."""
    try:
        check(st, tmp_path / "logs", final=True)
    except AssertionError as exc:
        return str(exc).split("\n")
    return []


def test_the_workers_resolves_check_clean(tmp_path: Path) -> None:
    """The worker's op, on own, fork, shared and contested branches written through the
    worker's logged calls, logs what the checker accepts (80 seeded draws, some refused:
    ~3 and ~4 of chains of 3)."""
    st = cpstore.open(tmp_path / "s")
    (tmp_path / "logs").mkdir()
    log = Log(str(tmp_path / "logs" / "w0.log"), 0, 0)
    w = Worker(st, log, random.Random(67), "w0")
    for run in (RUN, SHARED, CONTESTED):
        rec = st.recorder(run)
        for _ in range(3):
            w.checkpoint(rec, run, "main")
    base = st.ref(RUN)
    assert base is not None
    oid, _ = w.call("fork", lambda: st.fork(RUN, "f0_0_1", base), run=RUN, branch="f0_0_1")
    w.ack("fork", oid, run=RUN, branch="f0_0_1", cid=base)
    w.forks["f0_0_1"] = {"base": base, "heads": [base], "n": 1}
    refused = 0
    for _ in range(80):
        try:
            resolve_by_name(w)
        except NotFoundError:
            refused += 1
    with st:
        check(st, tmp_path / "logs", final=True)
    assert 0 < refused < 80
