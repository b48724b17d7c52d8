"""Recorder.checkpoint(meta_expected=) inside an LMDB group commit (durability "sync").

Writes of several threads queued while a group commits are committed together in one
txn. A conditional write whose condition fails there rolls that txn back; each write
of the group is then committed again alone, so the condition fails only its own call:
the others are stored and get no error, and nothing of the failed one is written.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import cpstore
from cpstore.errors import ConflictError
from cpstore.store.model import CheckpointWrite

_KEY = b"lg/grouped-key"


def test_a_failed_condition_in_a_group_fails_only_its_own_write(tmp_path: Path) -> None:
    with cpstore.open(tmp_path / "s") as s:
        group = s.backend.group
        inner: Callable[[Sequence[CheckpointWrite]], None] = group._commit_many
        queued = threading.Event()
        calls: list[int] = []

        def commit_many(ops: Sequence[CheckpointWrite]) -> None:
            calls.append(len(ops))
            if len(calls) == 1:  # hold the first group until the three others queue
                while len(group._queue) < 3:
                    time.sleep(0.001)
                queued.set()
            inner(ops)

        group._commit_many = commit_many
        outcome: dict[str, str | BaseException] = {}

        def write(run: str, expect: bool) -> None:
            try:
                cond = [(_KEY, b"never stored")] if expect else ()
                outcome[run] = s.recorder(run).checkpoint(
                    0,
                    {run: 0},
                    extra_meta=lambda cid: [(b"lg/" + run.encode(), b"v")],
                    meta_expected=cond,
                )
            except BaseException as exc:  # the outcome under test
                outcome[run] = exc

        first = threading.Thread(target=write, args=("first", False))
        first.start()
        while not calls:
            time.sleep(0.001)
        others = [
            threading.Thread(target=write, args=(run, run == "bad"))
            for run in ("good1", "bad", "good2")
        ]
        for t in others:
            t.start()
        for t in [first, *others]:
            t.join(timeout=60)
        assert queued.is_set()
        assert calls[:2] == [1, 3]  # the three shared one group txn, then each alone
        bad = outcome["bad"]
        assert isinstance(bad, ConflictError) and bad.got == "missing"
        for run in ("first", "good1", "good2"):
            assert isinstance(outcome[run], str), outcome[run]
            assert s.ref(run) == outcome[run]
        assert "bad" not in s.runs()
        with s.backend.read_txn() as txn:
            meta = s.backend.db("meta")
            assert txn.get(b"lg/bad", db=meta) is None
            assert bytes(txn.get(b"lg/good1", db=meta)) == b"v"
        assert s.verify().ok
