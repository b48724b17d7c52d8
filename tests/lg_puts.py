"""Small LangGraph saver helpers shared by tests: a config, a one-channel put, and a
thread whose head an operator's reset holds."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import run_for
from cpstore.store import Store
from cpstore.store.model import AuditRecord


def cfg(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    """A config of ``thread`` (root namespace), naming ``checkpoint_id`` when given."""
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def put_value(saver: CpstoreSaver, thread: str, parent: str | None, value: str) -> str:
    """Put a checkpoint of ``thread`` whose one channel ``x`` holds ``value``; its id."""
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["channel_values"] = {"x": value}
    cp["channel_versions"] = {"x": value}
    meta = {"source": "loop", "step": 0, "parents": {}}
    done = saver.put(cfg(thread, parent), cp, meta, {"x": value})
    return str(done["configurable"]["checkpoint_id"])


def thread_with_held_fork(
    store: Store, thread: str = "t"
) -> tuple[CpstoreSaver, str, str, str, AuditRecord]:
    """Three puts on ``thread``, then a branch ``kept`` forked at its head and reset away
    by operator "ann" (a hold on the head): the saver, run, thread branch, head and the
    reset's audit record."""
    saver = CpstoreSaver(store)
    parent = None
    for value in ("a1", "a2", "a3"):
        parent = put_value(saver, thread, parent, value)
    run = run_for(thread)
    [(branch, head)] = store.branches(run).items()
    store.fork(run, "kept", head)
    hold = store.reset_ref(run, "kept", None, expected_old=head, operator="ann", reason="keep")
    return saver, run, branch, head, hold
