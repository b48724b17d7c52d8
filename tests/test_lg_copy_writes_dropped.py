"""copy_thread records a checkpoint in one txn and its writes in the next: a
delete_thread of the target (another process) between the two left the writes behind
with no index entry naming their checkpoint (space no read or delete of a checkpoint
ever reached again, and the copy went on as if whole). Now the writes' txn checks the
entry is still there: ConflictError naming the race, and no write is left."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from lg_puts import cfg, put_value
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.errors import ConflictError
from cpstore.langgraph import CpstoreSaver
from cpstore.store.lg_index import WRITE_PREFIX, field, scan

_DELETE = (
    "import sys\nfrom cpstore.langgraph import CpstoreSaver\n"
    "with CpstoreSaver.from_conn_string(sys.argv[1]) as s:\n    s.delete_thread(sys.argv[2])\n"
)


def _writes_of(saver: CpstoreSaver, thread: str) -> int:
    backend = saver.store.backend
    with backend.read_txn() as txn:
        return sum(1 for _ in scan(txn, backend.db("meta"), WRITE_PREFIX + field(thread, "t")))


@pytest.mark.parametrize("kind", ["lmdb", "pg"])
def test_a_target_checkpoint_deleted_before_its_writes_takes_none(
    kind: str,
    tmp_path: Path,
    pg_url: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    at = str(tmp_path / "s") if kind == "lmdb" else pg_url
    with CpstoreSaver.from_conn_string(at) as saver:
        ids: list[str] = []
        for i in range(3):
            ids.append(put_value(saver, "src", ids[-1] if ids else None, f"v{i}"))
            saver.put_writes(cfg("src", ids[-1]), [("x", f"w{i}"), ("y", i)], f"task{i}")
        writer = saver._writer
        commit = writer.commit
        calls: list[int] = []

        def commit_then_race(put: Any) -> str:
            done = commit(put)
            calls.append(1)
            if len(calls) == 2:  # the second checkpoint recorded, its writes not yet
                subprocess.run([sys.executable, "-c", _DELETE, at, "dst"], check=True, timeout=120)
            return done

        monkeypatch.setattr(writer, "commit", commit_then_race)
        with pytest.raises(ConflictError) as info:
            saver.copy_thread("src", "dst")
        assert "target thread changed during the copy" in info.value.what
        assert info.value.got == "no index entry"
        monkeypatch.undo()
        assert list(saver.list(cfg("dst"))) == []  # the delete took both entries
        assert _writes_of(saver, "dst") == 0  # and no write outlived them
        assert _writes_of(saver, "src") == 6  # the source is untouched
        saver.copy_thread("src", "dst2")  # a copy no one races is whole, writes and all
        assert len(list(saver.list(cfg("dst2")))) == 3
        assert _writes_of(saver, "dst2") == 6
        got = saver.get_tuple(cfg("dst2", ids[1]))
        assert got is not None
        assert sorted((c, v) for _, c, v in got.pending_writes) == [("x", "w1"), ("y", 1)]
