"""review99: ``transfer()`` into a batched handle commits the handle's queue first.

A transfer handed an open batched destination moved its refs blind to the checkpoints
that handle had queued: a branch one of them extends moved under it, and the handle's
next flush failed ConflictError and dropped the whole batch, a checkpoint of another
run too, every id already returned. As a sweep does (retention96), the transfer now
commits the queue first: what the handle acknowledged lands, and the branch that went
elsewhere is the transfer's conflict, the other branches landing as before. A refused
transfer (the same store) commits nothing; a queue whose commit fails is raised with a
note, nothing copied.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError, SameStoreError
from cpstore.store.transfer import transfer


def _ahead(url: str, tmp_path: Path) -> tuple[str, str]:
    """(a source folder whose run ``a`` is one checkpoint ahead of ``url``'s, that
    checkpoint); ``url`` gets ``a`` at step 0 and the source run ``b`` too."""
    src = str(tmp_path / f"src{os.urandom(4).hex()}")
    with cpstore.open(url) as d:
        d.recorder("a").checkpoint(0, {"a": 0})
    with cpstore.open(src) as s, cpstore.open(url) as d:
        transfer(d.backend, s.backend)
        ahead = s.recorder("a").checkpoint(1, {"src": 1})
        s.recorder("b").checkpoint(0, {"b": 0})
    return src, ahead


def test_a_transfer_into_a_batched_handle_keeps_its_queued_checkpoints(
    url: str, tmp_path: Path
) -> None:
    src, ahead = _ahead(url, tmp_path)
    with cpstore.open(src) as s, cpstore.open(url, durability="batched", batch_size=1000) as d:
        mine = d.recorder("a").checkpoint(1, {"dst": 1})  # queued on a, as d read it
        other = d.recorder("q").checkpoint(0, {"q": 0})  # queued, another run
        with pytest.raises(ConflictError) as raised:
            transfer(s.backend, d.backend)
        assert raised.value.got == ["a/main"]  # a went elsewhere: the queue's, kept
        assert d.pending == 0
        d.flush()  # nothing left to fail
        assert d.ref("a") == mine and d.ref("q") == other
        assert d.ref("b") is not None  # the other branch landed
        assert d.ref("a") != ahead
        assert d.verify().ok
    with cpstore.open(url) as d:  # durable
        assert d.ref("a") == mine and d.ref("q") == other


def test_a_refused_transfer_commits_nothing_and_a_failed_commit_says_so(
    url: str, tmp_path: Path
) -> None:
    src, _ahead_id = _ahead(url, tmp_path)
    with cpstore.open(src) as s, cpstore.open(url, durability="batched", batch_size=1000) as d:
        d.recorder("a").checkpoint(1, {"dst": 1})
        with pytest.raises(SameStoreError):
            transfer(d.backend, d.backend)
        assert d.pending == 1  # refused before the queue was touched
        with cpstore.open(url) as o:  # another handle moves a: the queue now conflicts
            o.recorder("a").checkpoint(1, {"moved": 1})
        with pytest.raises(ConflictError) as raised:
            transfer(s.backend, d.backend)
        exc = raised.value
        assert exc.where == "refs/a/main" and "before the" not in str(exc)
        notes = getattr(exc, "__notes__", [])
        assert len(notes) == 1, notes
        assert "before the transfer, which did not run: nothing was copied" in notes[0]
        assert d.ref("b") is None  # nothing copied
