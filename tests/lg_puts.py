"""Small LangGraph saver helpers shared by tests: a config and a one-channel put."""

from __future__ import annotations

from typing import Any

from langgraph.checkpoint.base import empty_checkpoint

from cpstore.langgraph import CpstoreSaver


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
