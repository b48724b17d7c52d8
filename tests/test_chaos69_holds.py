"""chaos69: the chaos checker keeps a retained head until every hold on it is released.

Since holders69 a retained head keeps every hold (two resets of one head, a twin branch
reset away from the head its sibling sat on, a repair keeping a head a reset holds), and
releasing one leaves the others standing. The checker's keep rules read any logged
release of the head as releasing it: a store that dropped the second hold with the
first (what holders69 fixed) passed them. Now a release counts only for the hold it
names (``holder``, or the one an unnamed release's acknowledgement says it
``released``), and a fork branch's checkpoints become sweepable only by a release that
left no hold (its ``left``). Each ``*_is_reported`` test plants a log the checker before
chaos69 accepted; each ``*_passes`` pins the case it must still accept. The worker test
runs the new twin and release code on a real store.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from chaos_check import Model, damage_holds
from chaos_errors import Context, allowed
from chaos_log import Log
from chaos_roles import release_repair_hold
from chaos_worker import Worker
from test_chaos_mutations import _fake_log, check

import cpstore

RUN = "tmp-h"


def _held_twice(st: cpstore.Store) -> tuple[str, list[dict[str, Any]], list[Any]]:
    """``RUN``'s head reset away twice (set forward between): two holds on it. The store
    then releases both; the lines log both resets and only the first release."""
    rec = st.recorder(RUN)
    first = rec.checkpoint(0, b"a")
    head = rec.checkpoint(1, b"b")
    holds = []
    for _ in range(2):
        holds.append(st.reset_ref(RUN, "main", first, expected_old=head, operator="o", reason="r"))
        st.set_ref(RUN, "main", head, expected_old=first)
    # A third hold (the ref deleted, so nothing but the holds keeps the head), unlogged.
    gone = st.reset_ref(RUN, "main", None, expected_old=head, operator="o", reason="r")
    rels = [
        st.release_retained(head, operator="o", reason="r", holder=h.digest) for h in [*holds, gone]
    ]
    lines: list[dict[str, Any]] = []
    for n, h in enumerate(holds):
        rs = {"run": RUN, "branch": "main", "old": head, "new": first}
        lines += [
            {"ev": "b", "op": "reset", "id": f"r{n}", **rs},
            {"ev": "a", "op": "reset", "id": f"r{n}", "digest": h.digest, "index": h.index, **rs},
        ]
    return head, lines, rels


def _pruned(ids: tuple[str, ...]) -> list[dict[str, Any]]:
    """The log lines of a ``prune(keep_last=1)`` that removed ``ids``."""
    return [
        {"ev": "b", "op": "prune", "id": "p", "keep": 1, "run": None},
        {"ev": "a", "op": "prune", "id": "p", "removed": len(ids),
         "ids": list(ids), "keep": 1, "run": None},
    ]  # fmt: skip


def _release(n: str, cid: str, rec: Any, *, holder: str | None, **more: Any) -> list[Any]:
    fields = {"run": RUN, "branch": "main", "cid": cid, "holder": holder}
    return [
        {"ev": "b", "op": "release", "id": n, **fields},
        {"ev": "a", "op": "release", "id": n, "cid": cid, "digest": rec.digest,
         "index": rec.index, "left": rec.body["holders_left"], **more},
    ]  # fmt: skip


class TestKeepUntilEveryHold:
    def test_a_head_lost_after_one_of_two_holds_released_is_reported(self, tmp_path: Path) -> None:
        """Two acked resets of one head, one release naming the first: the head gone from
        retained() is lost (the second hold stands), and so is a gc reporting it removed.
        Before chaos69 the one release excused both resets."""
        with cpstore.open(tmp_path / "s") as st:
            head, lines, rels = _held_twice(st)
            gc = st.gc(keep_last=1)
            assert head in gc.checkpoints
            lines += _release("l0", head, rels[0], holder=rels[0].body["holder"])
            lines += _pruned(gc.checkpoints)
            _fake_log(tmp_path / "logs", lines)
            with pytest.raises(AssertionError) as got:
                check(st, tmp_path / "logs", final=True)
            assert f"retained head lost: {head}" in str(got.value)
            assert "a retained head not released" in str(got.value)

    def test_a_head_released_by_every_hold_passes(self, tmp_path: Path) -> None:
        """The same with both releases logged (one named, one unnamed whose ack says which
        hold it released): the sweep may take it."""
        with cpstore.open(tmp_path / "s") as st:
            head, lines, rels = _held_twice(st)
            gc = st.gc(keep_last=1)
            lines += _release("l0", head, rels[0], holder=rels[0].body["holder"])
            lines += _release("l1", head, rels[1], holder=None, released=rels[1].body["holder"])
            lines += _pruned(gc.checkpoints)
            _fake_log(tmp_path / "logs", lines)
            check(st, tmp_path / "logs", final=True)

    def test_an_unnamed_release_that_released_another_hold_excuses_nothing(
        self, tmp_path: Path
    ) -> None:
        """An unnamed release whose ack says it released the first hold does not excuse the
        second reset's head."""
        with cpstore.open(tmp_path / "s") as st:
            head, lines, rels = _held_twice(st)
            lines += _release("l0", head, rels[0], holder=None, released=rels[0].body["holder"])
            _fake_log(tmp_path / "logs", lines)
            with pytest.raises(AssertionError, match=f"retained head lost: {head}"):
                check(st, tmp_path / "logs", final=True)


class TestForkCheckpointsKeptByATwin:
    def _planted(self, tmp_path: Path, *, twin_released: bool) -> tuple[cpstore.Store, Path]:
        """own-w0's fork ``f1`` with a checkpoint, twin ``g1`` at it; both reset away (two
        holds); the store releases both and sweeps. The log releases ``f1``'s hold (its
        ack: the twin's left), and the twin's only when ``twin_released``."""
        st = cpstore.open(tmp_path / "s")
        run = "own-w0"
        base = st.recorder(run).checkpoint(0, b"m")
        st.fork(run, "f1", base)
        sd = cpstore.state_digest(b"f")
        ck = st.recorder(run, branch="f1").checkpoint(1, b"f")
        st.fork(run, "g1", ck)
        resets = [
            st.reset_ref(run, b, base, expected_old=ck, operator="o", reason="r")
            for b in ("f1", "g1")
        ]
        rels = [st.release_retained(ck, operator="o", reason="r", holder=r.digest) for r in resets]
        st.gc(keep_last=1)
        assert st.verify_checkpoint(ck)  # swept
        c = {"run": run, "branch": "f1", "parent": base, "sd": sd}
        lines: list[dict[str, Any]] = [
            {"ev": "b", "op": "ckpt", "id": "c", **c},
            {"ev": "a", "op": "ckpt", "id": "c", "cid": ck, **c},
        ]
        for b, r in zip(("f1", "g1"), resets, strict=True):
            rs = {"run": run, "branch": b, "old": ck, "new": base}
            lines += [
                {"ev": "b", "op": "reset", "id": f"r{b}", **rs},
                {"ev": "a", "op": "reset", "id": f"r{b}", "digest": r.digest, "index": r.index,
                 **rs},
            ]  # fmt: skip
        for b, r, h in zip(("f1", "g1"), rels, resets, strict=True):
            if b == "g1" and not twin_released:
                continue
            rb = {"run": run, "branch": b, "home": "f1", "cid": ck, "holder": h.digest}
            lines += [
                {"ev": "b", "op": "release", "id": f"l{b}", **rb},
                {"ev": "a", "op": "release", "id": f"l{b}", "cid": ck, "digest": r.digest,
                 "index": r.index, "left": r.body["holders_left"]},
            ]  # fmt: skip
        lines += [
            {"ev": "b", "op": "prune", "id": "p", "keep": 3, "run": None},
            {"ev": "a", "op": "prune", "id": "p", "removed": 1, "keep": 3, "run": None},
        ]
        _fake_log(tmp_path / "logs", lines)
        return st, tmp_path / "logs"

    def test_a_fork_checkpoint_swept_while_a_twin_holds_it_is_reported(
        self, tmp_path: Path
    ) -> None:
        """The release of ``f1``'s hold left the twin's: no sweep may take the checkpoint.
        Before chaos69 any release on ``f1`` let it go."""
        st, logs = self._planted(tmp_path, twin_released=False)
        with st, pytest.raises(AssertionError, match="acknowledged checkpoint lost"):
            check(st, logs, final=True)

    def test_a_fork_checkpoint_swept_after_the_twins_release_passes(self, tmp_path: Path) -> None:
        """With the twin's release logged (branch ``g1``, home ``f1``, nothing left)."""
        st, logs = self._planted(tmp_path, twin_released=True)
        with st:
            check(st, logs, final=True)


def test_several_holders_error_only_for_an_unnamed_release_of_a_head_held_twice() -> None:
    """The operator's unnamed release of a head two records may hold: SeveralHoldersError
    allowed; with one hold in the log, or a holder named, reported."""
    cid = "ab" * 16
    rel_b = {"ev": "b", "op": "release", "id": "99.0.2", "cid": cid, "holder": None, "t": 50}
    rel_x = {"ev": "x", "op": "release", "id": "99.0.2", "err": "SeveralHoldersError", "t": 60}
    reset = ({"ev": "b", "op": "reset", "id": "1.0.1", "old": cid, "t": 10}, None)
    damage = (
        {"ev": "b", "op": "damage", "id": "99.0.1", "run": "r", "branch": "f", "t": 20},
        {"ev": "a", "op": "damage", "id": "99.0.1", "retained": cid, "kept": [], "t": 30},
    )
    assert allowed(rel_b, rel_x, Context([reset, damage, (rel_b, rel_x)]))
    assert not allowed(rel_b, rel_x, Context([damage, (rel_b, rel_x)]))
    named = {**rel_b, "holder": "cd" * 16}
    assert not allowed(named, rel_x, Context([reset, damage, (named, rel_x)]))


def test_a_worker_resets_a_twin_and_releases_each_hold_by_name(tmp_path: Path) -> None:
    """The worker's twin (a branch forked at the head it resets away from) and a reset of
    the twin give the head two holds; each release names its hold and logs what is left."""
    with cpstore.open(tmp_path / "s") as st:
        w = Worker(st, Log(str(tmp_path / "w0.log"), 0, 0), random.Random(7), "w0")
        base = st.recorder(w.run).checkpoint(0, b"m")
        st.fork(w.run, "f1", base)
        head = st.recorder(w.run, branch="f1").checkpoint(1, b"f")
        w.forks["f1"] = {"base": base, "heads": [head], "n": 1}
        w.twin("f1", head)
        twin = next(b for b in w.forks if b != "f1")
        assert st.ref(w.run, twin) == head and w.forks[twin]["home"] == "f1"
        for b in ("f1", twin):
            rec = st.reset_ref(w.run, b, None, expected_old=head, operator="o", reason="r")
            w.retained.append((head, b, rec.digest))
        assert len(st.retained()[head]["holds"]) == 2
        w.rng = random.Random(0)
        w.op_release()
        assert head in st.retained()  # the other hold stands
        w.op_release()
        assert head not in st.retained()
    rows = [json.loads(r) for r in (tmp_path / "w0.log").read_text().splitlines()]
    rel = [r for r in rows if r["op"] == "release"]
    assert [r["ev"] for r in rel] == ["b", "a", "b", "a"]
    assert all(r["holder"] for r in rel if r["ev"] == "b")
    assert [len(r["left"]) for r in rel if r["ev"] == "a"] == [1, 0]
    assert {r["home"] for r in rel if r["ev"] == "b"} == {"f1"}


def test_the_heads_a_repair_keeps_are_held_like_a_resets() -> None:
    """A fork repair's ``retained`` and ``kept``, and a rollback repair's ``kept`` (its
    ``retained`` is rollback_problems'), are checked as a reset's old head is; an unnamed
    release of a head such a ``kept`` and a reset hold may be SeveralHoldersError."""
    x, y, z = "ab" * 16, "cd" * 16, "ef" * 16
    ops = [
        ({"ev": "b", "op": "damage", "id": "99.0.1", "run": "r", "branch": "f", "t": 1},
         {"ev": "a", "op": "damage", "id": "99.0.1", "digest": "1" * 32, "retained": x,
          "kept": [y], "t": 2}),
        ({"ev": "b", "op": "ref_repair", "id": "99.0.2", "run": "r", "branch": "main", "t": 3},
         {"ev": "a", "op": "ref_repair", "id": "99.0.2", "digest": "2" * 32, "retained": y,
          "kept": [z], "t": 4}),
    ]  # fmt: skip
    m = Model([line for pair in ops for line in pair])
    got = [(a["old"], a["digest"]) for _, a in damage_holds(m)]
    assert got == [(x, "1" * 32), (y, "1" * 32), (z, "2" * 32)]
    rel_b = {"ev": "b", "op": "release", "id": "99.0.3", "cid": z, "holder": None, "t": 50}
    rel_x = {"ev": "x", "op": "release", "id": "99.0.3", "err": "SeveralHoldersError", "t": 60}
    reset = ({"ev": "b", "op": "reset", "id": "1.0.1", "old": z, "t": 10}, None)
    assert allowed(rel_b, rel_x, Context([*ops, reset, (rel_b, rel_x)]))
    assert not allowed(rel_b, rel_x, Context([*ops, (rel_b, rel_x)]))


def test_the_operators_unnamed_release_of_a_head_held_twice_is_refused_and_judged(
    tmp_path: Path,
) -> None:
    """release_repair_hold's probe of a head two resets hold: SeveralHoldersError, both
    holds stand, and the checker allows the refusal."""
    with cpstore.open(tmp_path / "s") as st:
        head, lines, _ = _held_twice_kept(st)
    _fake_log(tmp_path / "logs", lines)
    op = Log(str(tmp_path / "logs" / "w99.log"), 99, 0)
    assert random.Random(1).random() < 0.5  # its first draw picks the probe
    release_repair_hold(str(tmp_path / "s"), op, random.Random(1))
    rows = [json.loads(r) for r in (tmp_path / "logs" / "w99.log").read_text().splitlines()]
    assert [(r["ev"], r.get("err")) for r in rows] == [("b", None), ("x", "SeveralHoldersError")]
    with cpstore.open(tmp_path / "s") as st:
        assert len(st.retained()[head]["holds"]) == 2
        check(st, tmp_path / "logs", final=True)


def _held_twice_kept(st: cpstore.Store) -> tuple[str, list[dict[str, Any]], list[Any]]:
    """``RUN``'s head held by two logged resets (nothing released)."""
    rec = st.recorder(RUN)
    first = rec.checkpoint(0, b"a")
    head = rec.checkpoint(1, b"b")
    lines: list[dict[str, Any]] = []
    holds = []
    for n in range(2):
        h = st.reset_ref(RUN, "main", first, expected_old=head, operator="o", reason="r")
        st.set_ref(RUN, "main", head, expected_old=first)
        holds.append(h)
        rs = {"run": RUN, "branch": "main", "old": head, "new": first}
        lines += [
            {"ev": "b", "op": "reset", "id": f"r{n}", **rs},
            {"ev": "a", "op": "reset", "id": f"r{n}", "digest": h.digest, "index": h.index, **rs},
        ]
    return head, lines, holds


def test_a_twin_of_a_rerooted_branch_resets_to_an_ancestor_and_forward_again(
    tmp_path: Path,
) -> None:
    """A fork branch deleted and recorded on again (a root, no parent) keeps its old base in
    the worker's books; the twin at its head takes the head's parent as base, so the
    worker's reset back and ``set_ref`` forward again land. With the branch's base (soak
    pg-69312) the forward move was refused NotDescendantError."""
    with cpstore.open(tmp_path / "s") as st:
        w = Worker(st, Log(str(tmp_path / "w0.log"), 0, 0), random.Random(7), "w0")
        base = st.recorder(w.run).checkpoint(0, b"m")
        rec = st.recorder(w.run, branch="f1")  # re-rooted: no parent
        root = rec.checkpoint(1, b"r")
        head = rec.checkpoint(2, b"h")
        w.forks["f1"] = {"base": base, "heads": [head], "n": 2}
        w.twin("f1", head)
        twin = next(b for b in w.forks if b != "f1")
        back = w.forks[twin]["base"]
        assert back == root
        st.reset_ref(w.run, twin, back, expected_old=head, operator="o", reason="r")
        st.set_ref(w.run, twin, head, expected_old=back)
        assert st.ref(w.run, twin) == head
