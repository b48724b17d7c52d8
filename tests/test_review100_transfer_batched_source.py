"""review100: ``transfer()`` from a batched handle commits the handle's queue first.

A transfer reads the source's committed refs; a batched source handle's queued
checkpoints (ids returned) were not among them: the transfer of a branch whose head the
handle had returned silently sent its committed parent ("ok", one checkpoint short), and
a run the handle had queued whole was "no such run in the source store". It now commits
the source's queue before it reads the refs, as it does a batched receiver's (review99);
a refusal that needs no read (the same store) commits nothing, and a commit that fails is
raised as the flush raised it with a note, nothing copied. Both ends on each backend.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError, SameStoreError
from cpstore.store.transfer import transfer


def _committed(url: str) -> str:
    """Run ``a`` with two committed checkpoints in ``url``; its head."""
    with cpstore.open(url) as s:
        rec = s.recorder("a")
        rec.checkpoint(0, {"a": 0})
        return rec.checkpoint(1, {"a": 1})


def test_a_transfer_sends_what_the_source_handle_returned(url: str, tmp_path: Path) -> None:
    _committed(url)
    dest = str(tmp_path / f"d{os.urandom(4).hex()}")
    with cpstore.open(url, durability="batched", batch_size=1000) as s, cpstore.open(dest) as d:
        head = s.recorder("a").checkpoint(2, {"a": 2})  # queued, id returned
        new = s.recorder("n").checkpoint(0, {"n": 0})  # a run queued whole
        report = transfer(s.backend, d.backend, run_id="n")  # before: "no such run"
        assert s.pending == 0 and d.ref("n") == new
        transfer(s.backend, d.backend)
        assert d.ref("a") == head  # before: the committed parent, reported as sent
        assert report.refs_created == 1
        assert d.verify().ok


def test_a_refused_transfer_commits_nothing_and_a_failed_commit_says_so(
    url: str, tmp_path: Path
) -> None:
    head = _committed(url)
    dest = str(tmp_path / f"d{os.urandom(4).hex()}")
    with cpstore.open(url, durability="batched", batch_size=1000) as s, cpstore.open(dest) as d:
        s.recorder("a").checkpoint(2, {"a": 2})
        with pytest.raises(SameStoreError):
            transfer(s.backend, s.backend)
        assert s.pending == 1  # refused before the queue was touched
        with cpstore.open(url) as o:  # another handle moves a: the queue now conflicts
            moved = o.recorder("a").checkpoint(2, {"moved": 2})
        with pytest.raises(ConflictError) as raised:
            transfer(s.backend, d.backend)
        exc = raised.value
        assert exc.where == "refs/a/main" and "before the" not in str(exc)
        notes = getattr(exc, "__notes__", [])
        assert len(notes) == 1, notes
        assert "sending handle's queued checkpoints" in notes[0]
        assert "before the transfer, which did not run: nothing was copied" in notes[0]
        assert d.ref("a") is None  # nothing copied
        assert s.pending == 0 and s.ref("a") == moved != head
