"""Defects planted in the chaos log that the refusal table's allowances excused (audit26).

Each ``*_is_reported`` test writes the log a store defect would leave (what the worker
logs when the store misbehaves that way) and fails on the table before audit26: a ref
the operator repaired still met damaged by a call begun after the repair (a stale read,
excused for 1 s), a "pruned" refusal nothing in the log could have pruned (excused by
its message alone), a resume gate refused with a fresh sign-off and a standing decision
(excused as "a non-ACCEPT without a sign-off"). Each ``*_passes`` test pins the
documented case beside it, which the tightened rule must still allow.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from test_chaos_checker_rules import BRANCH, REF, RUN, _refused, _store
from test_chaos_mutations import _fake_log, check

import cpstore


def _damage_then_repair(st: cpstore.Store) -> list[dict[str, object]]:
    """The operator's damage of the fork ref and its repair, done (as chaos_roles does)
    and logged."""
    key, refs = f"{RUN}\0{BRANCH}".encode(), st.backend.dbs["refs"]

    def flip(txn: Any) -> None:
        value = bytes(txn.get(key, db=refs))
        txn.put(key, value[:-1] + bytes([value[-1] ^ 1]), db=refs)

    st.backend.write_txn(flip)
    rec = st.repair_ref(RUN, BRANCH, None, operator="chaos", reason="damaged")
    return [
        {"ev": "b", "op": "damage", "id": "9", "run": RUN, "branch": BRANCH},
        {"ev": "a", "op": "damage", "id": "9", "digest": rec.digest, "index": rec.index},
    ]


class TestPlantedDefects:
    def test_a_call_begun_after_the_repair_meeting_the_damaged_ref_is_reported(
        self, tmp_path: Path
    ) -> None:
        """A prune begun after the repair was acknowledged still refused by the damaged ref:
        a stale ref read (before: excused for 1 s after the repair)."""
        st, _, _ = _store(tmp_path)
        stale = _refused("prune", "1", "IntegrityError", f"ref damaged; at {REF}", keep=3, run=None)
        _fake_log(tmp_path / "logs", [*_damage_then_repair(st), *stale])
        with st, pytest.raises(AssertionError, match="refusal not allowed: prune IntegrityError"):
            check(st, tmp_path / "logs", final=True)

    def test_a_call_begun_before_the_repair_meeting_the_damaged_ref_passes(
        self, tmp_path: Path
    ) -> None:
        """The same refusal for a prune begun while the damage stood, ended after the repair;
        and one a loop caught outside a logged call just after (logged with its own time)."""
        st, _, _ = _store(tmp_path)
        msg = f"ref damaged; at {REF}"
        damage, repaired = _damage_then_repair(st)
        _fake_log(tmp_path / "logs", [
            damage, {"ev": "b", "op": "prune", "id": "1", "keep": 3, "run": None}, repaired,
            {"ev": "x", "op": "prune", "id": "1", "err": "IntegrityError", "msg": msg},
            {"ev": "err", "op": "fork_more", "err": "IntegrityError", "msg": msg},
        ])  # fmt: skip
        with st:
            check(st, tmp_path / "logs", final=True)

    def test_a_pruned_refusal_with_no_sweep_in_the_log_is_reported(self, tmp_path: Path) -> None:
        """fork of an acknowledged base refused as pruned when no prune, gc or deletion ever
        ran: a lost or misread checkpoint (before: excused by the word "pruned")."""
        st, first, _ = _store(tmp_path)
        msg = f"the checkpoint was pruned; at checkpoint {first}"
        _fake_log(tmp_path / "logs", _refused("fork", "1", "NotFoundError", msg, base=first))
        with st, pytest.raises(AssertionError, match="refusal not allowed: fork NotFoundError"):
            check(st, tmp_path / "logs", final=True)

    def test_a_pruned_refusal_after_a_sweep_passes(self, tmp_path: Path) -> None:
        st, first, _ = _store(tmp_path)
        msg = f"the checkpoint was pruned; at checkpoint {first}"
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "prune", "id": "0", "keep": 3, "run": None},
            *_refused("fork", "1", "NotFoundError", msg, base=first),
        ])  # fmt: skip
        with st:
            check(st, tmp_path / "logs", final=True)

    def test_a_signed_gate_refused_with_a_standing_decision_is_reported(
        self, tmp_path: Path
    ) -> None:
        """resume_gate with a fresh sign-off of the standing decision refused (before: any
        GateError of a gate passed as "a non-ACCEPT without a sign-off")."""
        st, first, _ = _store(tmp_path)
        msg = f"no permit; at checkpoint {first}"
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "validate", "id": "0", "cid": first, "other": first},
            *_refused("gate", "1", "GateError", msg, cid=first, signed=True),
        ])  # fmt: skip
        with st, pytest.raises(AssertionError, match="refusal not allowed: gate GateError"):
            check(st, tmp_path / "logs", final=True)

    def test_an_unsigned_gate_or_a_superseded_signed_one_refused_passes(
        self, tmp_path: Path
    ) -> None:
        st, first, _ = _store(tmp_path)
        superseded = f"a later decision supersedes this one; at checkpoint {first}"
        _fake_log(tmp_path / "logs", [
            {"ev": "b", "op": "validate", "id": "0", "cid": first, "other": first},
            *_refused("gate", "1", "GateError", "needs a sign-off", cid=first),
            *_refused("gate", "2", "GateError", superseded, cid=first, signed=True),
        ])  # fmt: skip
        with st:
            check(st, tmp_path / "logs", final=True)


def test_the_planted_store_is_sound(tmp_path: Path) -> None:
    """The store the planted logs are checked against verifies (the reports are the log's)."""
    st, _, _ = _store(tmp_path)
    with st:
        assert isinstance(st, cpstore.Store)
        assert st.verify().ok
