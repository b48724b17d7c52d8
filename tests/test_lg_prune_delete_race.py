"""LangGraph prune(keep_latest) beside a delete_thread of the same thread in another process.

keep_latest drops the older index entries (one txn), then records the kept checkpoints
again on fresh branches from parts it read before (one txn each). A delete_thread
acknowledged in between (entries dropped, the run deleted and swept) was undone: the
re-record wrote the kept checkpoint, its value bytes and its index entry back, and the
deleted thread listed a checkpoint again. The re-record now moves an entry only while
it is the one the prune read (checked in the re-record's own txn); a deleted thread
stays deleted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lg_puts import cfg, put_value
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.langgraph import CpstoreSaver, _copy_delete, _maintain

_DELETE = (
    "import sys\nfrom cpstore.langgraph import CpstoreSaver\n"
    "with CpstoreSaver.from_conn_string(sys.argv[1]) as s:\n    s.delete_thread(sys.argv[2])\n"
)


@pytest.mark.parametrize("kind", ["lmdb", "pg"])
def test_a_thread_deleted_while_keep_latest_reclaims_stays_deleted(
    kind: str,
    tmp_path: Path,
    pg_url: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another process deletes the thread after the prune read the kept checkpoint and
    before it records it again: the thread stays deleted (no entry, no run), the prune
    returns, the store verifies; a thread beside it is untouched."""
    at = str(tmp_path / "s") if kind == "lmdb" else pg_url
    with CpstoreSaver.from_conn_string(at) as saver:
        ids: list[str] = []
        for i in range(4):
            ids.append(put_value(saver, "t", ids[-1] if ids else None, f"secret {i}"))
        other = put_value(saver, "u", None, "kept")
        copy_one = _copy_delete._copy_one  # patched where the prune calls it
        raced: list[bool] = []

        def delete_then_record(*args: Any, **kwargs: Any) -> None:
            if not raced:
                raced.append(True)
                subprocess.run([sys.executable, "-c", _DELETE, at, "t"], check=True, timeout=120)
            copy_one(*args, **kwargs)

        monkeypatch.setattr(_maintain, "_copy_one", delete_then_record)
        saver.prune(["t"])
        assert raced
        assert list(saver.list(cfg("t"))) == []  # before: the newest checkpoint, back
        assert saver.get_tuple(cfg("t")) is None
        assert [r for r in saver.store.runs() if r.startswith("lg:t")] == []
        tup = saver.get_tuple(cfg("u"))
        assert tup is not None and tup.config["configurable"]["checkpoint_id"] == other
        assert saver.store.verify().ok


_PUT = (
    "import sys\nsys.path.insert(0, sys.argv[3])\nfrom lg_puts import put_value\n"
    "from cpstore.langgraph import CpstoreSaver\n"
    "with CpstoreSaver.from_conn_string(sys.argv[1]) as s:\n"
    "    print(put_value(s, 't', sys.argv[2], 'late put'))\n"
)


@pytest.mark.parametrize("kind", ["lmdb", "pg"])
def test_a_put_acknowledged_after_the_prunes_txn_is_never_swept(
    kind: str,
    tmp_path: Path,
    pg_url: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another process puts a child of the newest checkpoint after keep_latest dropped the
    older entries, before it reclaims: the branch heads the reclaim resets must be the ones
    the prune's txn saw, so the moved branch fails its compare-and-set and is kept. Before,
    they were read after the put: the put's branch was reset and swept, the acknowledged
    put vanished from list and get_tuple returned None."""
    at = str(tmp_path / "s") if kind == "lmdb" else pg_url
    with CpstoreSaver.from_conn_string(at) as saver:
        ids: list[str] = []
        for i in range(4):
            ids.append(put_value(saver, "t", ids[-1] if ids else None, f"v{i}"))
        reclaim = _maintain._reclaim
        late: list[str] = []

        def put_then_reclaim(*args: Any) -> None:
            done = subprocess.run(
                [sys.executable, "-c", _PUT, at, ids[-1], str(Path(__file__).parent)],
                check=True,
                capture_output=True,
                text=True,
                timeout=120,
            )
            late.append(done.stdout.strip())
            reclaim(*args)

        monkeypatch.setattr(_maintain, "_reclaim", put_then_reclaim)
        saver.prune(["t"])
        listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg("t"))]
        assert late[0] in listed  # before: swept
        tup = saver.get_tuple(cfg("t"))
        assert tup is not None and tup.checkpoint["channel_values"] == {"x": "late put"}
        assert saver.store.verify().ok
