"""review99: a push's child collecting a parent's batched handle writes nothing of it.

damage98 runs a push from an LMDB source in a forked child. The child inherits whatever
this process has open: here a batched handle with a queued checkpoint, reachable only
through a reference cycle, which the child's garbage collection finalizes. Held: the
child writes none of the parent's queue (its finalizer flushes only in the process that
opened the store); the parent's own collection flushes it later, as it would have.
"""

from __future__ import annotations

import gc
import os
import warnings
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
import cpstore.store.transfer as transfer_module
from cpstore import cli


@pytest.fixture
def no_gc() -> Iterator[None]:
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_a_push_childs_collection_of_a_parents_batched_handle_writes_nothing(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_gc: None
) -> None:
    src, dest, note = str(tmp_path / "src"), str(tmp_path / "dest"), tmp_path / "note"
    with cpstore.open(src) as store:
        store.recorder("a").checkpoint(0, {"a": 0})
    held = cpstore.open(url, durability="batched", batch_size=1000)
    queued = held.recorder("q").checkpoint(0, {"q": 0})
    cycle: list[Any] = [held]
    cycle.append(cycle)  # only the cycle keeps it: a collection finalizes it
    alive = weakref.ref(held)
    del held, cycle
    real = transfer_module._land_branch

    def land(*args: Any, **kwargs: Any) -> Any:  # in the child
        gc.collect()
        note.write_text(f"{os.getpid()} {alive() is None}")
        return real(*args, **kwargs)

    monkeypatch.setattr(transfer_module, "_land_branch", land)
    assert cli.main(["push", dest, "--store", src]) == 0
    pid, finalized = note.read_text().split()
    assert int(pid) != os.getpid() and finalized == "True"  # collected in the child
    assert alive() is not None  # not here
    with cpstore.open(url) as store:
        assert store.ref("q") is None  # the child wrote none of the parent's queue
    with warnings.catch_warnings(record=True) as told:
        warnings.simplefilter("always")
        gc.collect()  # here: the finalizer flushes it, and says so
    assert alive() is None
    assert any("flushed 1 queued checkpoint(s)" in str(w.message) for w in told)
    with cpstore.open(url) as store:
        assert store.ref("q") == queued
        assert store.verify().ok
