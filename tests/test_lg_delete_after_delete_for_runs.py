"""delete_thread after delete_for_runs took every index entry of the thread.

delete_for_runs drops entries and leaves their cpstore checkpoints on their branches;
docs/langgraph.md says those bytes are reclaimed when the thread is deleted. But
delete_thread swept only the runs the thread's entries named: with none left, it
swept nothing, and the thread's checkpoints (their values) stayed stored for good.
It now sweeps the thread's own run (``run_for``, when it has branches) too, unless
another thread's entries name it.
"""

from __future__ import annotations

from typing import Any

import pytest
from langgraph.checkpoint.base import empty_checkpoint
from lg_puts import cfg, put_value
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._codec import run_for

LONG = "L" * 300  # a hashed (scheme-2) run


def _put_for_run(saver: CpstoreSaver, thread: str, value: str, run_id: str) -> None:
    cp: dict[str, Any] = dict(empty_checkpoint())
    cp["channel_values"] = {"x": value}
    cp["channel_versions"] = {"x": value}
    meta = {"source": "loop", "step": 0, "parents": {}, "run_id": run_id}
    saver.put(cfg(thread), cp, meta, {"x": value})


@pytest.mark.parametrize("thread", ["t", LONG], ids=["plain", "hashed"])
def test_delete_thread_reclaims_what_delete_for_runs_left(url: str, thread: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        _put_for_run(saver, thread, "secret", "r1")
        other = put_value(saver, "u", None, "kept")
        saver.delete_for_runs(["r1"])
        assert list(saver.list(cfg(thread))) == []
        assert saver.store.branches(run_for(thread)) != {}  # the bytes stay, as documented
        saver.delete_thread(thread)
        assert saver.store.branches(run_for(thread)) == {}  # before: still there
        assert run_for(thread) not in saver.store.runs()
        tup = saver.get_tuple(cfg("u"))
        assert tup is not None and tup.config["configurable"]["checkpoint_id"] == other
        assert saver.store.verify().ok


def test_delete_of_a_thread_that_never_was_sweeps_nothing(url: str) -> None:
    with CpstoreSaver.from_conn_string(url) as saver:
        put_value(saver, "u", None, "kept")
        saver.delete_thread("never")
        assert saver.store.runs() == ["lg:u"]
