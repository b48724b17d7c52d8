"""refkey100: the chaos checker's rule for a refusal by a damaged ref row beside a key.

Since refkey100 a ref created from nothing, or a head read as absent, first checks the
ref rows beside its key; one failing its check is IntegrityError ("a damaged ref key may
be this ref", naming that row). In the chaos mix only the operator's flip of a fork's
check (``damage``: chaos_roles.damage_and_repair) makes such a row, so workers creating
forks beside it are refused while it stands. Met directly, the message names the damaged
row near its start and the damage rule (``Context.damaged_ref``) judges it. Relayed to
another thread's flush of a batched handle, it may be told after the repair, its words
cut at the log's 300 characters: the checker before refkey100 rejected that (its relayed
IntegrityError rule knew a vanish only). The messages planted here are the store's own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from chaos_check import Model
from chaos_errors import Context, allowed

import cpstore
from cpstore.errors import CpstoreError, IntegrityError
from cpstore.store.batch_fates import dropped_error

RUN, FORK = "own-w1", "f2"
#: The operator's flip of RUN/FORK's check: begun at t 10, repaired (deleted) at t 40.
T0, R1 = 10, 40


def _refused(tmp_path: Path) -> IntegrityError:
    """The store's refusal of a fork created beside RUN/FORK, whose check was flipped as
    the chaos operator flips it (the value's last byte)."""
    with cpstore.open(tmp_path / "s") as st:
        head = st.recorder(RUN).checkpoint(0, {"i": 0})
        st.fork(RUN, FORK, head)
        key, refs = f"{RUN}\0{FORK}".encode(), st.backend.dbs["refs"]

        def flip(txn: Any) -> None:
            value = bytes(txn.get(key, db=refs))
            txn.put(key, value[:-1] + bytes([value[-1] ^ 1]), db=refs)

        st.backend.write_txn(flip)
        with pytest.raises(IntegrityError) as told:
            st.fork(RUN, "f3", head)
    return told.value


def _relayed(exc: CpstoreError, where: str = "/tmp/chaos/store") -> str:
    """What another thread's flush is told of ``exc`` (the store's own relay), as logged."""
    return str(dropped_error(exc, 1, where))[:300]


def _judge(op: str, t0: int, t1: int, msg: str, *, damage: bool = True) -> bool:
    lines: list[dict[str, Any]] = []
    if damage:
        lines += [
            {"t": T0, "ev": "b", "op": "damage", "id": "d", "run": RUN, "branch": FORK},
            {"t": R1, "ev": "a", "op": "damage", "id": "d", "digest": "d" * 64, "index": 0,
             "retained": None, "kept": []},
        ]  # fmt: skip
    lines += [
        {"t": t0, "ev": "b", "op": op, "id": "x", "run": RUN, "branch": "f3"},
        {"t": t1, "ev": "x", "op": op, "id": "x", "err": "IntegrityError", "msg": msg},
    ]
    rows = [{"w": 0, "inc": 0, **r} for r in sorted(lines, key=lambda r: r["t"])]
    ops = Model(rows).ops
    b, e = next((b, e) for b, e in ops if e is not None and e["id"] == "x")
    return allowed(b, e, Context(ops))


def test_the_refusal_names_the_damaged_row_within_the_logged_characters(
    tmp_path: Path,
) -> None:
    exc = _refused(tmp_path)
    logged = str(exc)[:300]
    assert logged.startswith("a damaged ref key may be this ref")
    assert f"refs/{RUN}/{FORK} beside it" in logged
    assert _judge("fork", 20, 25, logged)  # met directly in the window: the damage rule
    assert _judge("ckpt", 20, 25, logged)
    assert not _judge("fork", 50, 51, logged)  # begun after the repair: never
    assert not _judge("fork", 20, 25, logged, damage=False)  # no damage in the log


def test_a_relayed_refusal_told_after_the_repair_is_allowed(tmp_path: Path) -> None:
    """Failed before refkey100: the relayed IntegrityError rule knew a vanish only."""
    msg = _relayed(_refused(tmp_path))
    assert "in another thread's batch commit" in msg and "a damaged ref key may be" in msg
    assert _judge("flush", 50, 51, msg)
    assert _judge("ckpt", 50, 51, msg)


def test_a_relayed_refusal_cut_before_its_words_is_allowed(tmp_path: Path) -> None:
    """The relay's ``where`` (the store's location) long enough that the log's 300
    characters end before the relayed words."""
    msg = _relayed(_refused(tmp_path), "/tmp/" + "d" * 200 + "/store")
    assert "damaged" not in msg.partition("; got ")[2]
    assert _judge("flush", 50, 51, msg)


def test_relayed_refusals_the_rule_does_not_excuse(tmp_path: Path) -> None:
    exc = _refused(tmp_path)
    msg = _relayed(exc)
    assert not _judge("flush", 50, 51, msg, damage=False)  # no damage in the log
    assert not _judge("flush", 5, 8, msg)  # told before the damage began
    assert not _judge("fork", 50, 51, msg)  # a call that commits no queue
    other = _relayed(IntegrityError("ref does not match its check", where="refs/own-w2/x"))
    assert not _judge("flush", 50, 51, other)  # another refusal, its words shown
    assert not _judge("fork", 50, 51, str(exc)[:300])  # met directly after the repair
