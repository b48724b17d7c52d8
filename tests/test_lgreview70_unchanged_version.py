"""A channel whose version a put does not change reads as the value stored at that version,
whichever process (or saver) makes the put.

LangGraph hands a node the channel's value object itself: a node that mutates it in place
(``state["items"].append(...)``) changes the value the next put passes in
``channel_values`` without a new version. LangGraph's savers store a value only for the
channels of ``new_versions``, so they read the value stored when the version was new.
This saver did so when it had recorded the parent itself (its cached branch), but a put
made by another saver or process (no cache: a fork, a resumed thread, the first put of a
worker) stored the caller's mutated value: the same calls gave two different states,
depending on which process made the put. Now the parent's part at that version comes
before ``channel_values`` on every path.
"""

from __future__ import annotations

import multiprocessing
from typing import Any

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.memory import InMemorySaver
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver


def _conf(thread: str, checkpoint_id: str | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {"thread_id": thread, "checkpoint_ns": ""}
    if checkpoint_id is not None:
        conf["checkpoint_id"] = checkpoint_id
    return {"configurable": conf}


def _cp(items: list[str], note: str, versions: dict[str, str]) -> dict[str, Any]:
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["channel_values"] = {"items": items, "note": note}
    cp["channel_versions"] = dict(versions)
    return cp


def _first(saver: Any) -> dict[str, Any]:
    """``items`` = [a] at version 1."""
    cp = _cp(["a"], "n1", {"items": "1", "note": "1"})
    return dict(saver.put(_conf("t"), cp, {"step": 0}, {"items": "1", "note": "1"}))


def _second(saver: Any, parent: dict[str, Any]) -> dict[str, Any]:
    """``items`` mutated in place to [a, b], its version still 1; ``note`` changed."""
    cp = _cp(["a", "b"], "n2", {"items": "1", "note": "2"})
    return dict(saver.put(parent, cp, {"step": 1}, {"note": "2"}))


def _second_in_process(url: str, parent: dict[str, Any]) -> dict[str, Any]:
    with CpstoreSaver.from_conn_string(url) as saver:
        return _second(saver, parent)


def _values(saver: Any, config: dict[str, Any]) -> dict[str, Any]:
    got = saver.get_tuple(config)
    assert got is not None
    return dict(got.checkpoint["channel_values"])


def test_an_unchanged_version_reads_the_stored_value_on_every_path(url: str) -> None:
    memory = InMemorySaver()
    expected = _values(memory, _second(memory, _first(memory)))
    assert expected == {"items": ["a"], "note": "n2"}  # LangGraph's blob per version
    with CpstoreSaver.from_conn_string(url) as saver:
        warm = _values(saver, _second(saver, _first(saver)))
    assert warm == expected
    with CpstoreSaver.from_conn_string(url) as saver:
        parent = _first(saver)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        done = pool.apply(_second_in_process, (url, parent))
    with CpstoreSaver.from_conn_string(url) as saver:
        cold = _values(saver, done)
        assert cold == expected
        # a fork of the first checkpoint (another branch: no cached values) agrees too
        fork = _values(saver, _second(saver, parent))
        assert fork == expected
        assert saver.store.verify().ok
