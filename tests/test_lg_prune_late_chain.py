"""LangGraph prune(keep_latest) beside puts that extend the thread while it reclaims.

keep_latest drops the old index entries in one txn, records the kept checkpoints again
on fresh branches, resets the branches the txn saw, then sweeps the run. A branch
another process moved meanwhile fails its reset and is kept (docs/langgraph.md,
"Maintenance": "a concurrent put is never swept"). The sweep itself must not take
what the reset kept: it pruned every branch of the run to the longest kept chain, so
of two puts acknowledged in between, the older was swept (gone from ``list``,
``get_tuple`` None), and a DeltaChannel state read through it lost its history.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lg_puts import cfg, put_value
from pg_cluster import backend_url  # noqa: F401 - fixture

from cpstore.langgraph import CpstoreSaver, _maintain

_PUTS = (
    "import sys\nsys.path.insert(0, sys.argv[3])\nfrom lg_puts import put_value\n"
    "from cpstore.langgraph import CpstoreSaver\n"
    "with CpstoreSaver.from_conn_string(sys.argv[1]) as s:\n"
    "    parent = sys.argv[2]\n"
    "    for i in range(int(sys.argv[4])):\n"
    "        parent = put_value(s, 't', parent, f'late {i}')\n"
    "        print(parent, flush=True)\n"
)


def _late_puts(at: str, parent: str, n: int) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", _PUTS, at, parent, str(Path(__file__).parent), str(n)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.stdout.split()


def test_puts_acknowledged_while_keep_latest_reclaims_are_all_kept(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process puts three checkpoints (a chain from the newest) after the
    prune's txn, before its reclaim: every one of them still reads (listed, get_tuple by
    id), the thread's newest is the last of them, verify is clean."""
    with CpstoreSaver.from_conn_string(url) as saver:
        ids: list[str] = []
        for i in range(4):
            ids.append(put_value(saver, "t", ids[-1] if ids else None, f"v{i}"))
        reclaim = _maintain._reclaim
        late: list[str] = []

        def puts_then_reclaim(*args: Any) -> None:
            late.extend(_late_puts(url, ids[-1], 3))
            reclaim(*args)

        monkeypatch.setattr(_maintain, "_reclaim", puts_then_reclaim)
        saver.prune(["t"])
        assert len(late) == 3
        listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg("t"))]
        for n, cid in enumerate(late):
            tup = saver.get_tuple(cfg("t", cid))
            assert tup is not None, f"late put {n} of 3 swept"  # before: 0 and 1 swept
            assert tup.checkpoint["channel_values"] == {"x": f"late {n}"}
            assert cid in listed
        newest = saver.get_tuple(cfg("t"))
        assert newest is not None and newest.config["configurable"]["checkpoint_id"] == late[-1]
        assert saver.store.verify().ok
