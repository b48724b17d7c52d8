"""review99: checkpoints another thread of a batched handle queues while a sweep runs.

A sweep first commits the handle's queue (retention96), then sweeps in its own txn. What
another thread queues between the two is not in the sweep's view, as what another
process records is not (docs/durability.md). Probed here by queuing from a second
thread at that very point (the sweep's module function wrapped):

* a checkpoint extending a branch head, and one of another run, survive the sweep
  and the next flush (the sweep keeps every head, and touches no other run);
* a fork of a checkpoint the sweep removes is refused by the next flush as "pruned",
  never written naming a parent that is not stored; the store verifies.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
import cpstore.store.facade_upkeep as upkeep
from cpstore.errors import ConflictError


def _in_window(monkeypatch: pytest.MonkeyPatch, name: str, queue: Callable[[], None]) -> None:
    """Run ``queue`` on another thread after the sweep's flush, before its txn."""
    real = getattr(upkeep, name)

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        failed: list[BaseException] = []

        def target() -> None:
            try:
                queue()
            except BaseException as exc:  # told to the sweeping thread
                failed.append(exc)

        t = threading.Thread(target=target)
        t.start()
        t.join(60)
        if failed:
            raise failed[0]
        return real(*args, **kwargs)

    monkeypatch.setattr(upkeep, name, wrapped)


@pytest.mark.parametrize("sweep", ["prune", "delete_run"])
def test_heads_and_other_runs_queued_during_a_sweep_survive_it(
    url: str, monkeypatch: pytest.MonkeyPatch, sweep: str
) -> None:
    with cpstore.open(url, durability="batched", batch_size=1000) as s:
        rec = s.recorder("r")
        for i in range(3):
            rec.checkpoint(i, {"i": i})
        s.recorder("gone").checkpoint(0, {"g": 0})
        s.flush()
        got: dict[str, str] = {}

        def queue() -> None:
            got["next"] = rec.checkpoint(3, {"i": 3})
            got["q"] = s.recorder("q").checkpoint(0, {"q": 0})

        _in_window(monkeypatch, sweep, queue)
        if sweep == "prune":
            assert s.prune(keep_last=1) == 2
        else:
            assert s.delete_run("gone") == 1
        assert s.pending == 2  # queued after the sweep's flush: not in it
        s.flush()
        assert s.ref("r") == got["next"] and s.ref("q") == got["q"]
        with s.read(got["next"]) as cp:
            assert cp.state() == {"i": 3}
        assert s.verify().ok


def test_a_fork_queued_during_a_sweep_that_takes_its_parent_is_refused(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cpstore.open(url, durability="batched", batch_size=1000) as s:
        rec = s.recorder("r")
        first = rec.checkpoint(0, {"i": 0})
        for i in range(1, 3):
            rec.checkpoint(i, {"i": i})
        s.flush()
        side = s.recorder("r", branch="side", parent=first)  # read while first is stored
        got: dict[str, str] = {}

        def queue() -> None:
            got["fork"] = side.checkpoint(1, {"side": 1})

        _in_window(monkeypatch, "prune", queue)
        assert s.prune(keep_last=1) == 2  # first among them: the fork is not in its view
        with pytest.raises(ConflictError) as raised:
            s.flush()
        assert raised.value.where == "refs/r/side" and raised.value.got == "pruned"
        assert s.pending == 0 and s.ref("r", "side") is None  # nothing dangling written
        assert s.verify().ok
