"""LangGraph copy_thread beside a process deleting or pruning the source thread.

copy_thread scans the source thread's entries in one read txn, decodes each
checkpoint (one txn each) and then records each again (one txn each): a
delete_thread or keep_latest prune of the source (another process) part-way
through the recording left the target with the first checkpoints only and returned
as if the copy were whole. Now that is a ConflictError naming the race and how many
checkpoints the target got; a copy the race did not touch is whole. A keep_latest
prune between the scan and the first read moved the kept entry to a new checkpoint:
the copy returned empty (the scan's entry named a pruned one); each entry is now read
again in each txn.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from lg_puts import cfg, put_value
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

from cpstore.errors import ConflictError
from cpstore.langgraph import CpstoreSaver, _copy_delete, _maintain

_DELETE = (
    "import sys\nfrom cpstore.langgraph import CpstoreSaver\n"
    "with CpstoreSaver.from_conn_string(sys.argv[1]) as s:\n    s.delete_thread(sys.argv[2])\n"
)
_PRUNE = (
    "import sys\nfrom cpstore.langgraph import CpstoreSaver\n"
    "with CpstoreSaver.from_conn_string(sys.argv[1]) as s:\n    s.prune([sys.argv[2]])\n"
)


def _where(kind: str, tmp_path: Path, url: str) -> str:
    return str(tmp_path / "s") if kind == "lmdb" else url


def _thread(saver: CpstoreSaver, thread: str, n: int) -> list[str]:
    ids: list[str] = []
    for i in range(n):
        ids.append(put_value(saver, thread, ids[-1] if ids else None, f"{thread} v{i}"))
    return ids


@pytest.mark.parametrize("kind", ["lmdb", "pg"])
@pytest.mark.parametrize("script", [_DELETE, _PRUNE], ids=["delete_thread", "prune"])
def test_a_source_thread_deleted_or_pruned_mid_copy_is_a_named_race_not_a_partial_copy(
    kind: str,
    script: str,
    tmp_path: Path,
    pg_url: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another process deletes (or prunes) the source after the copy recorded two
    checkpoints and read the third: ConflictError naming the race and the count (3, the
    third was read whole before the race), not a silent 3 of 5 (a prune's kept head
    among the missing)."""
    at = _where(kind, tmp_path, pg_url)
    with CpstoreSaver.from_conn_string(at) as saver:
        _thread(saver, "src", 5)
        copy_one = _copy_delete._copy_one
        copied: list[int] = []

        def copy_then_race(*args: Any) -> None:
            if len(copied) == 2:
                subprocess.run([sys.executable, "-c", script, at, "src"], check=True, timeout=120)
            copy_one(*args)
            copied.append(1)

        monkeypatch.setattr(_copy_delete, "_copy_one", copy_then_race)
        with pytest.raises(ConflictError) as info:
            saver.copy_thread("src", "dst")
        assert "changed during the copy" in info.value.what
        assert info.value.got == "3 of 5 checkpoints copied to 'dst'"
        assert len(list(saver.list(cfg("dst")))) == 3  # what the error says the target holds
        assert saver.store.verify().ok


@pytest.mark.parametrize("kind", ["lmdb", "pg"])
def test_a_source_thread_deleted_before_the_copy_reads_it_copies_nothing_quietly(
    kind: str,
    tmp_path: Path,
    pg_url: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Deleted after the scan, before any checkpoint was read: as if the delete came
    first (nothing to copy), as copy_thread of a deleted thread does."""
    at = _where(kind, tmp_path, pg_url)
    with CpstoreSaver.from_conn_string(at) as saver:
        _thread(saver, "src", 3)
        backend = saver.store.backend
        read_txn = backend.read_txn
        reads: list[bool] = []

        def delete_after_the_scan() -> Any:
            if len(reads) == 1:  # the scan's txn ended, no checkpoint read yet
                subprocess.run([sys.executable, "-c", _DELETE, at, "src"], check=True, timeout=120)
            reads.append(True)
            return read_txn()

        monkeypatch.setattr(backend, "read_txn", delete_after_the_scan)
        saver.copy_thread("src", "dst")
        assert list(saver.list(cfg("dst"))) == []
        assert saver.store.verify().ok


@pytest.mark.parametrize("kind", ["lmdb", "pg"])
def test_a_source_pruned_after_the_scan_copies_what_the_prune_kept(
    kind: str,
    tmp_path: Path,
    pg_url: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """keep_latest (another process) after the scan, before any checkpoint was read: it
    moved the kept entry to a new checkpoint, so the scan's entry names a pruned one. The
    copy is the one after the prune (the newest), never empty: it read each entry again."""
    at = _where(kind, tmp_path, pg_url)
    with CpstoreSaver.from_conn_string(at) as saver:
        ids = _thread(saver, "src", 4)
        backend = saver.store.backend
        read_txn = backend.read_txn
        reads: list[bool] = []

        def prune_after_the_scan() -> Any:
            if len(reads) == 1:
                subprocess.run([sys.executable, "-c", _PRUNE, at, "src"], check=True, timeout=120)
            reads.append(True)
            return read_txn()

        monkeypatch.setattr(backend, "read_txn", prune_after_the_scan)
        saver.copy_thread("src", "dst")
        monkeypatch.undo()
        got = [t.config["configurable"]["checkpoint_id"] for t in saver.list(cfg("dst"))]
        assert got == [ids[-1]]  # before: [] (the copy returned as if whole)
        tup = saver.get_tuple(cfg("dst"))
        assert tup is not None and tup.checkpoint["channel_values"] == {"x": "src v3"}
        assert saver.store.verify().ok


# Puts four checkpoints on the source thread, then prunes it (keep_latest) or deletes it.
_CHURN = r"""
import os, sys
sys.path.insert(0, sys.argv[3])
from lg_puts import put_value
from cpstore.langgraph import CpstoreSaver
at, stop = sys.argv[1], sys.argv[2]
n = 0
with CpstoreSaver.from_conn_string(at) as s:
    while not os.path.exists(stop):
        parent = None
        for i in range(4):
            parent = put_value(s, "src", parent, f"src {n} {i}")
        n += 1
        if n % 3 == 0:
            s.delete_thread("src")
        else:
            s.prune(["src"])
        open(stop + ".ready", "w").close()
print(n, flush=True)
"""


@pytest.mark.parametrize("kind", ["lmdb", "pg"])
def test_copies_and_prunes_beside_a_process_churning_the_source_whole_or_named(
    kind: str,
    tmp_path: Path,
    pg_url: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A process puts, prunes and deletes the source thread nonstop beside 60 copy_thread
    and keep_latest prunes of it: a copy returns or fails with the race named, a prune
    returns, every checkpoint a target lists reads back as some put of the source, and
    the store verifies."""
    at, stop = _where(kind, tmp_path, pg_url), tmp_path / "stop"
    copy_one = _copy_delete._copy_one

    def slower(*args: Any, **kwargs: Any) -> None:
        time.sleep(0.01)  # widen the window between reading a checkpoint and recording it
        copy_one(*args, **kwargs)

    for module in (_copy_delete, _maintain):  # copy_thread's calls, and keep_latest's
        monkeypatch.setattr(module, "_copy_one", slower)
    with CpstoreSaver.from_conn_string(at) as saver:
        put_value(saver, "src", None, "src seed")
        churn = subprocess.Popen(
            [sys.executable, "-c", _CHURN, at, str(stop), str(Path(__file__).parent)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        outcomes: list[str] = []
        try:
            while not Path(str(stop) + ".ready").exists() and churn.poll() is None:
                time.sleep(0.05)
            for k in range(60):
                try:
                    saver.copy_thread("src", f"dst{k}")
                    outcomes.append("copied")
                except ConflictError as exc:
                    assert "changed during the copy" in exc.what, exc
                    outcomes.append("race")
                saver.prune(["src"])
                for tup in saver.list(cfg(f"dst{k}")):
                    assert tup.checkpoint["channel_values"]["x"].startswith("src "), tup
        finally:
            stop.touch()
            out, err = churn.communicate(timeout=300)
        assert churn.returncode == 0, err
        assert int(out) > 0
        assert "copied" in outcomes
        assert saver.store.verify().ok
        print(f"outcomes {outcomes.count('copied')} copied, {outcomes.count('race')} races")
