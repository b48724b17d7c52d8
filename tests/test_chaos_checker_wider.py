"""The chaos checker's wider invariants bite (tests/chaos_check.py, tests/test_chaos_mutations.py).

Planted logs against a real store: an unknown commit outcome outside a server
restart (and one across a restart, which passes), a lost ``put_writes``, a
peer checkpoint the peer lacks, and a prune explained by a put whose connection was
lost. The worker's own ``list`` check: an id no put began is named, one whose
outcome was unknown passes only with the values put.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from chaos_roles import list_problem, values_digest
from chaos_worker import SHARED
from langgraph.checkpoint.base import empty_checkpoint
from test_chaos_mutations import _fake_log, check

import cpstore
from cpstore.langgraph import CpstoreSaver


def _store(tmp_path: Path) -> cpstore.Store:
    st = cpstore.open(tmp_path / "s")
    st.recorder(SHARED).checkpoint(0, {"a": 1})
    return st


def _put(st: cpstore.Store, thread: str) -> tuple[str, dict[str, Any]]:
    """One saver put on ``thread``; (its id, the log fields of its ack)."""
    cp = empty_checkpoint()
    cp["channel_values"] = {"doc": "d", "n": 0}
    cp["channel_versions"] = {"doc": 1, "n": 1}
    conf = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
    got = CpstoreSaver(st).put(conf, cp, {"step": 0}, {"doc": 1, "n": 1})
    cid = got["configurable"]["checkpoint_id"]
    return cid, {"run": f"lg:{thread}", "branch": "main", "thread": thread, "vd": "0" * 32}


class TestWiderCheckerBites:
    def test_an_unknown_outcome_outside_a_server_restart_is_reported(self, tmp_path: Path) -> None:
        """OutcomeUnknownError with no restart in the log fails the check."""
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "audit", "id": "1"},
            {"ev": "x", "op": "audit", "id": "1", "err": "OutcomeUnknownError"},
        ])  # fmt: skip
        with _store(tmp_path) as st, pytest.raises(AssertionError, match="outcome unknown"):
            check(st, tmp_path / "logs", final=True)

    def test_an_unknown_outcome_across_a_server_restart_passes(self, tmp_path: Path) -> None:
        """The same error during a logged restart is what docs/store.md "Faults" promises."""
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "audit", "id": "1"},
            {"ev": "b", "op": "restart", "id": "2"},
            {"ev": "x", "op": "audit", "id": "1", "err": "OutcomeUnknownError"},
            {"ev": "a", "op": "restart", "id": "2"},
        ])  # fmt: skip
        with _store(tmp_path) as st:
            check(st, tmp_path / "logs", final=True)

    def test_a_put_writes_the_saver_lacks_is_reported_lost(self, tmp_path: Path) -> None:
        """An acked put_writes its checkpoint's tuple does not hold fails the check."""
        with _store(tmp_path) as st:
            cid, fields = _put(st, "t")
            fields["vd"] = _digest_of(st, cid)
            _fake_log(tmp_path / "logs", [
                {"ev": "b", "op": "lgput", "id": "1", "parent": None, **fields},
                {"ev": "a", "op": "lgput", "id": "1", "cid": cid, **fields},
                {"ev": "b", "op": "lgwrite", "id": "2", "thread": "t", "cid": cid},
                {"ev": "a", "op": "lgwrite", "id": "2", "thread": "t", "cid": cid, "task": "k",
                 "value": "v"},
            ])  # fmt: skip
            with pytest.raises(AssertionError, match="acknowledged put_writes lost"):
                check(st, tmp_path / "logs", final=True)

    def test_a_peer_checkpoint_the_peer_lacks_is_reported(self, tmp_path: Path) -> None:
        """An acked checkpoint recorded on the peer that the peer lacks fails the final check."""
        cpstore.open(tmp_path / "peer").close()
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "pckpt", "id": "1", "run": "peer-w0-0", "sd": "0" * 32},
            {"ev": "a", "op": "pckpt", "id": "1", "run": "peer-w0-0", "cid": "ab" * 16,
             "sd": "0" * 32},
        ])  # fmt: skip
        with _store(tmp_path) as st, pytest.raises(AssertionError, match="not whole in the peer"):
            check(st, tmp_path / "logs", final=True, peer=str(tmp_path / "peer"))


class TestVerifyInTheMix:
    PROBLEM = "Problem(what='ref does not match its check', where='refs/own-w0/f1')"

    def _log(self, tmp_path: Path, damage: dict[str, Any] | None) -> None:
        lines: list[dict[str, Any]] = [
            {"ev": "b", "op": "verify", "id": "1"},
            {"ev": "a", "op": "verify", "id": "1", "ok": False, "problems": [self.PROBLEM]},
        ]
        if damage is not None:
            lines = [{"ev": "b", "op": "damage", "id": "0", "run": "own-w0", "branch": "f1"},
                     *lines, {"ev": "a", "op": "damage", "id": "0", **damage}]  # fmt: skip
        _fake_log(tmp_path / "logs", lines)

    def test_a_verify_in_the_mix_that_found_problems_is_reported(self, tmp_path: Path) -> None:
        """A worker's verify() that reported problems, no ref damaged meanwhile, fails the
        check (it was logged and never looked at)."""
        self._log(tmp_path, None)
        with _store(tmp_path) as st, pytest.raises(AssertionError, match="verify in the mix"):
            check(st, tmp_path / "logs", final=True)

    def test_a_verify_beside_the_damage_naming_another_problem_is_reported(
        self, tmp_path: Path
    ) -> None:
        """In the window, a problem that is not the damaged ref's is still reported."""
        with _store(tmp_path) as st:
            rec = st.append_audit("chaos", {"repair": 1})
            self.PROBLEM = "Problem(what='object hash mismatch', where='objects/ab')"
            self._log(tmp_path, {"digest": rec.digest, "index": rec.index})
            with pytest.raises(AssertionError, match="verify in the mix"):
                check(st, tmp_path / "logs", final=True)

    def test_a_verify_beside_the_operators_damage_passes(self, tmp_path: Path) -> None:
        """The same during the operator's damaged-ref window is what it should find."""
        with _store(tmp_path) as st:
            rec = st.append_audit("chaos", {"repair": 1})  # stands for the repair's record
            self._log(tmp_path, {"digest": rec.digest, "index": rec.index})
            check(st, tmp_path / "logs", final=True)


class TestDamageWindow:
    def _log(self, tmp_path: Path, rec: Any, tb: str) -> None:
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "damage", "id": "0", "run": "own-w0", "branch": "f1"},
            {"ev": "defect", "op": "read", "err": "IntegrityError", "tb": tb},
            {"ev": "a", "op": "damage", "id": "0", "digest": rec.digest, "index": rec.index},
        ])  # fmt: skip

    def test_the_damaged_refs_integrity_error_in_its_window_passes(self, tmp_path: Path) -> None:
        """An IntegrityError naming the damaged ref, in its window: what the operator made."""
        with _store(tmp_path) as st:
            rec = st.append_audit("chaos", {"repair": 1})
            self._log(tmp_path, rec, "IntegrityError: ref does not match; at refs/own-w0/f1")
            check(st, tmp_path / "logs", final=True)

    def test_another_integrity_error_in_the_window_is_a_defect(self, tmp_path: Path) -> None:
        """An object's hash mismatch in the same window is not the damaged ref: reported
        (the window excused every IntegrityError, whatever it named)."""
        with _store(tmp_path) as st:
            rec = st.append_audit("chaos", {"repair": 1})
            self._log(tmp_path, rec, "IntegrityError: object hash mismatch; at objects/ab")
            with pytest.raises(AssertionError, match="defect"):
                check(st, tmp_path / "logs", final=True)


class TestRefusedRemovals:
    @pytest.mark.parametrize(("err", "lost"), [("ConflictError", True), (None, False)])
    def test_a_pin_is_excused_only_by_an_unpin_that_may_have_landed(
        self, tmp_path: Path, err: str | None, lost: bool
    ) -> None:
        """An acked pin the store lacks, then an unpin of it: excused when the unpin was
        acknowledged, reported when the store refused it (any unpin in the log excused it)."""
        d = "ab" * 16
        end = {"ev": "a", "was": True} if err is None else {"ev": "x", "err": err}
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "pin", "id": "1"},
            {"ev": "a", "op": "pin", "id": "1", "digest": d},
            {"ev": "b", "op": "unpin", "id": "2", "digest": d},
            {"op": "unpin", "id": "2", **end},
        ])  # fmt: skip
        with _store(tmp_path) as st:
            if lost:
                with pytest.raises(AssertionError, match="pinned object lost"):
                    check(st, tmp_path / "logs", final=True)
            else:
                check(st, tmp_path / "logs", final=True)

    @pytest.mark.parametrize(("err", "lost"), [("NotFoundError", True), (None, False)])
    def test_a_fork_checkpoint_is_excused_only_by_a_release_that_may_have_landed(
        self, tmp_path: Path, err: str | None, lost: bool
    ) -> None:
        """A missing acked fork checkpoint, a release of its branch's head, then a prune:
        excused when the release may have landed, not when the store refused it."""
        ck = {"run": "own-w0", "branch": "f0_0_1", "parent": None, "sd": "0" * 32}
        rel = {"run": "own-w0", "branch": "f0_0_1", "cid": "cd" * 16}
        with _store(tmp_path) as st:
            rec = st.append_audit("chaos", {"release": 1})  # stands for the release's record
            end = (
                {"ev": "a", "digest": rec.digest, "index": rec.index}
                if err is None
                else {"ev": "x", "err": err}
            )
            _fake_log(tmp_path / "logs", [
                {"ev": "b", "op": "ckpt", "id": "1", **ck},
                {"ev": "a", "op": "ckpt", "id": "1", "cid": "ab" * 16, **ck},
                {"ev": "b", "op": "release", "id": "2", **rel},
                {"op": "release", "id": "2", **end},
                {"ev": "b", "op": "prune", "id": "3", "run": None, "keep": 3},
                {"ev": "a", "op": "prune", "id": "3", "removed": 1},
            ])  # fmt: skip
            if lost:
                with pytest.raises(AssertionError, match="acknowledged checkpoint lost"):
                    check(st, tmp_path / "logs", final=True)
            else:
                check(st, tmp_path / "logs", final=True)


class TestDeletesHold:
    def test_a_run_still_listed_after_an_acknowledged_delete_is_reported(
        self, tmp_path: Path
    ) -> None:
        """An acked delete_run whose run still has its ref fails the check (acked deletes
        were only used to excuse missing checkpoints, never checked themselves)."""
        with _store(tmp_path) as st:
            st.recorder("tmp-x").checkpoint(0, {"t": 1})
            _fake_log(tmp_path / "logs", [
                {"ev": "b", "op": "delete", "id": "1", "run": "tmp-x"},
                {"ev": "a", "op": "delete", "id": "1", "run": "tmp-x"},
            ])  # fmt: skip
            with pytest.raises(AssertionError, match="still has refs after"):
                check(st, tmp_path / "logs", final=True)
            st.delete_run("tmp-x")
            check(st, tmp_path / "logs", final=True)

    def test_a_dry_run_that_says_it_was_not_one_is_reported(self, tmp_path: Path) -> None:
        """gc(dry_run=True) reports dry_run True; logged False, the check fails."""
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "dry_run", "id": "1"},
            {"ev": "a", "op": "dry_run", "id": "1", "would_remove": 0, "dry": False},
        ])  # fmt: skip
        with _store(tmp_path) as st, pytest.raises(AssertionError, match="dry run"):
            check(st, tmp_path / "logs", final=True)


class TestMayHaveCommitted:
    @pytest.mark.parametrize(
        ("err", "explained"),
        [("StoreConnectionError", True), ("OutcomeUnknownError", True), ("ConflictError", False)],
    )
    def test_a_prune_is_explained_by_a_newer_put_only_if_it_may_have_landed(
        self, tmp_path: Path, err: str, explained: bool
    ) -> None:
        """A missing acked checkpoint, then a newer put on its branch that raised, then a
        prune keeping 1: the prune explains the miss only when the put may have committed
        (its connection lost, or its outcome unknown), not when it was refused."""
        ghost = {"run": "own-w0", "branch": "main", "parent": None, "sd": "0" * 32}
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "restart", "id": "0"},
            {"ev": "b", "op": "ckpt", "id": "1", **ghost},
            {"ev": "a", "op": "ckpt", "id": "1", "cid": "ab" * 16, **ghost},
            {"ev": "b", "op": "ckpt", "id": "2", **ghost},
            {"ev": "x", "op": "ckpt", "id": "2", "err": err},
            {"ev": "b", "op": "prune", "id": "3", "run": "own-w0", "keep": 1},
            {"ev": "a", "op": "prune", "id": "3", "run": "own-w0", "keep": 1},
            {"ev": "a", "op": "restart", "id": "0"},
        ])  # fmt: skip
        with _store(tmp_path) as st:
            if explained:
                check(st, tmp_path / "logs", final=True)
            else:
                with pytest.raises(AssertionError, match="acknowledged checkpoint lost"):
                    check(st, tmp_path / "logs", final=True)


class TestListCheck:
    """chaos_roles.list_problem: what the worker's ``lg_write`` asks of the saver's list."""

    def _listed(self, st: cpstore.Store, thread: str) -> list[Any]:
        conf = {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
        return list(CpstoreSaver(st).list(conf, limit=4))

    def test_acknowledged_puts_pass_and_a_stranger_is_named(self, tmp_path: Path) -> None:
        with _store(tmp_path) as st:
            a, _ = _put(st, "t")
            b, _ = _put(st, "t")
            assert list_problem(self._listed(st, "t"), [a, b], {}) is None
            why = list_problem(self._listed(st, "t"), [a], {})
            assert why is not None and b in why.split("values):")[1]

    def test_an_unknown_outcome_put_passes_only_with_its_values(self, tmp_path: Path) -> None:
        """A put whose connection was lost may have landed whole: listed, it must hold the
        values that put carried."""
        with _store(tmp_path) as st:
            a, _ = _put(st, "t")
            b, _ = _put(st, "t")
            right = _digest_of(st, b, "t")
            assert list_problem(self._listed(st, "t"), [a], {b: right}) is None
            assert list_problem(self._listed(st, "t"), [a], {b: "f" * 32}) is not None


def _digest_of(st: cpstore.Store, cid: str, thread: str = "t") -> str:
    """The values digest the checker computes for the saver's checkpoint ``cid``."""
    conf = {"configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": cid}}
    tup = CpstoreSaver(st).get_tuple(conf)
    assert tup is not None
    return values_digest(tup.checkpoint["channel_values"])
