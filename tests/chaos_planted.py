"""Planting worker logs for the chaos checker's tests (tests/test_chaosflake_*.py,
test_review100_chaos_*): a thread's worker twin, a queued checkpoint's line, the
judgement of one refusal, and a real batched handle's queued line dropped."""

from __future__ import annotations

from typing import Any

import pytest
from chaos_check import Model
from chaos_errors import Context, allowed
from chaos_worker import SHARED, Worker

from cpstore.errors import ConflictError

#: The conflicts of the own run and of the shared run, as a worker's log keeps them.
OWN = "the branch moved since this recorder read it; at refs/own-w0/main"
SHARED_MSG = f"the branch moved since this recorder read it; at refs/{SHARED}/main"


def writer_of(w: Worker) -> Worker:
    """The second batched writer thread's worker (as chaos_roles.batched_writer makes it)."""
    t = Worker.__new__(Worker)
    t.__dict__.update(w.__dict__)
    t.name, t.run, t.main_pending, t.acked_main = f"{w.name}t", f"own-{w.name}t", [], []
    return t


def judged(lines: list[dict[str, Any]]) -> bool:
    """Whether the own run's conflict (operation "3") in ``lines`` (worker 0, incarnation
    0, in time order) is allowed."""
    rows = [{"w": 0, "inc": 0, "t": i + 1, **r} for i, r in enumerate(lines)]
    ops = Model(rows).ops
    b, e = next((b, e) for b, e in ops if e is not None and e["id"] == "3")
    return allowed(b, e, Context(ops))


def queued_ckpt(i: str) -> dict[str, Any]:
    """The ``b`` line of checkpoint ``i`` on worker 0's own run (never acknowledged)."""
    return {"ev": "b", "op": "ckpt", "id": i, "run": "own-w0", "branch": "main",
            "parent": None, "sd": "0" * 32}  # fmt: skip


def drop_queued_line(w: Worker) -> None:
    """On ``w``'s batched store: queue C1 and C2 on the own run, let the second writer
    thread's flush fail on the shared run (C1 and C2 dropped with its batch), then C3 on
    C2 is refused at once (hunt100: its head is not stored), nothing queued."""
    st, t = w.st, writer_of(w)
    w.checkpoint(w.main, w.run, "main", flush=False)  # C1, queued
    head = st.ref(SHARED)
    first, second = st.recorder(SHARED, parent=head), st.recorder(SHARED, parent=head)
    w.checkpoint(w.main, w.run, "main", flush=False)  # C2 on C1, queued
    t.checkpoint(first, SHARED, "main", flush=False)
    with pytest.raises(ConflictError, match="refs/shared/main"):
        t.checkpoint(second, SHARED, "main")  # its flush: C1 and C2 dropped with it
    assert len(w.main_pending) == 2
    with pytest.raises(ConflictError, match="at refs/own-w0/main") as c3:
        w.checkpoint(w.main, w.run, "main", flush=False)  # C3 on C2: refused
    assert "not stored" in str(c3.value)
    assert st.pending == 0 and w.main_pending == []  # C3 never queued, C1-C2 forgotten


def excuse_is_narrow(begin: dict[str, Any]) -> None:
    """The queue-commit excuse for ``begin`` (a batched op's ``b`` line, no id) failing
    ConflictError on the own run: allowed after a drop of the process's queued C1; not
    for the same op on a handle that is not batched, with no drop before, or with the
    only queued checkpoint after the failure ended."""
    flush = {"ev": "b", "op": "flush"}
    fail = {"ev": "x", "op": "flush", "err": "ConflictError", "msg": SHARED_MSG}
    own = {"ev": "x", "op": begin["op"], "err": "ConflictError", "msg": OWN, "id": "3"}
    dropped = [queued_ckpt("1"), {**flush, "id": "2"}, {**fail, "id": "2"}]
    assert judged([*dropped, {**begin, "id": "3"}, own])
    unbatched = {k: v for k, v in begin.items() if k != "batched"}
    assert not judged([*dropped, {**unbatched, "id": "3"}, own])
    assert not judged([queued_ckpt("1"), {**begin, "id": "3"}, own])  # no drop
    assert not judged([  # the only queued checkpoint came after the failure ended
        {**flush, "id": "2"}, {**fail, "id": "2"}, queued_ckpt("1"), {**begin, "id": "3"}, own,
    ])  # fmt: skip
