"""Planting worker logs for the chaos checker's tests (tests/test_chaosflake_*.py): a
thread's worker twin, a queued checkpoint's line, and the judgement of one refusal."""

from __future__ import annotations

from typing import Any

from chaos_check import Model
from chaos_errors import Context, allowed
from chaos_worker import Worker


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
