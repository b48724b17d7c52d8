"""Test helper: a small store of three checkpoints with observations and random blobs,
for the operator tools' tests (copy, verify, compact) to damage or interrupt."""

from __future__ import annotations

import os
from pathlib import Path

import cpstore

__all__ = ["small_store"]


def small_store(tmp_path: Path, name: str) -> str:
    """The folder of a new store ``tmp_path / name``: run "run", steps 1-3, closed."""
    path = str(tmp_path / name)
    with cpstore.open(path) as store:
        rec = store.recorder("run")
        for step in range(1, 4):
            rec.observe(step, "cfg", os.urandom(64), pinned_at=1.0)
            rec.checkpoint(step, {"blob": os.urandom(256)}, seal_ledger=False)
    return path
