"""``cpstore log`` (no run) beside a process deleting runs: one snapshot, never a run without
branches.

It listed the runs in one read txn and each run's branches in another: a run deleted
in between was printed with no branch at all (``"b": {}`` in ``--json``), a state no
store ever held (a run is a run id with at least one ref). Now the runs and their
branches are read in one txn.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore import cli
from cpstore.cli import inspect_commands

_DELETE = (
    "import sys, cpstore\nwith cpstore.open(sys.argv[1]) as s:\n    s.gc(delete_run=sys.argv[2])\n"
)


@pytest.mark.parametrize("kind", ["lmdb", "pg"])
def test_log_lists_runs_and_branches_from_one_snapshot(
    kind: str,
    tmp_path: Path,
    pg_url: str,  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Another process deletes run b once the listing's first read txn ends: b is listed
    with its branches (the snapshot before the delete), or not at all; never with none."""
    at = str(tmp_path / "s") if kind == "lmdb" else pg_url
    heads = {}
    with cpstore.open(at) as s:
        for run in ("a", "b"):
            heads[run] = s.recorder(run).checkpoint(0, {"run": run})
    opened = inspect_commands.open_store_at  # type: ignore[attr-defined]

    @contextlib.contextmanager
    def racing(args: Any, **kwargs: Any) -> Iterator[Any]:
        with opened(args, **kwargs) as store:
            backend = store.backend
            read_txn = backend.read_txn
            reads: list[bool] = []

            @contextlib.contextmanager
            def delete_after_the_first_read() -> Iterator[Any]:
                with read_txn() as txn:
                    yield txn
                if not reads:  # the listing's first read txn has ended
                    reads.append(True)
                    subprocess.run([sys.executable, "-c", _DELETE, at, "b"], check=True)

            monkeypatch.setattr(backend, "read_txn", delete_after_the_first_read)
            yield store

    monkeypatch.setattr(inspect_commands, "open_store_at", racing)
    code = cli.main(["log", "--store", at, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["a"] == {"main": heads["a"]}
    assert out.get("b", {"main": heads["b"]}) == {"main": heads["b"]}  # before: {}
    with cpstore.open(at) as s:
        assert s.runs() == ["a"]  # the delete really happened during the listing
