"""review80: a checkpoint compared with itself is the same, sealed or not.

lgsub80 made sealed threads ``undecidable`` without the saver's serde, and pinned a
thread compared with itself so too: its metadata (a step) did not decode, though every
byte on both sides is the same byte. Both sides naming one checkpoint of one thread and
namespace (the newest, or the same id) read one chain, one set of pending writes and
one set of subgraphs: resuming either gives what resuming the other does. That case is
now the same without decoding anything (every checkpoint of the chain is still read,
hash-checked); two threads, or two checkpoints of one, are compared as before. Both
engines; the command exits 0."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from pg_cluster import backend_url  # noqa: F401 - fixture
from test_review80_diff_sealed import _cfg, _graph, _serde

from cpstore.langgraph import CpstoreSaver, diff_threads


def _at(thread: str, checkpoint_id: str) -> dict[str, Any]:
    return {
        "configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": checkpoint_id}
    }


def test_a_sealed_thread_against_itself_is_the_same_without_the_serde(url: str) -> None:
    with CpstoreSaver.from_conn_string(url, serde=_serde()) as saver:
        graph = _graph(saver)
        for t in "ab":
            graph.invoke({"log": ["in"]}, _cfg(t))
        diff = diff_threads(saver.store, _cfg("a"), _cfg("a"))
        # before: undecidable ("the metadata of checkpoint ... is stored sealed")
        assert diff.same and not diff.undecidable, diff.summary
        assert diff.shared_until == 2 and "3 checkpoints" in diff.summary, diff.summary
        newest = graph.get_state(_cfg("a")).config["configurable"]["checkpoint_id"]
        assert diff_threads(saver.store, _at("a", newest), _cfg("a")).same
        # two threads, or an older checkpoint of the same thread: still undecidable
        assert diff_threads(saver.store, _cfg("a"), _cfg("b")).undecidable
        older = next(iter(graph.get_state_history(_cfg("a"))))  # the newest first
        parent = older.parent_config["configurable"]["checkpoint_id"]
        assert diff_threads(saver.store, _at("a", parent), _cfg("a")).undecidable


def test_the_command_exits_0_on_a_sealed_thread_against_itself(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with CpstoreSaver.from_conn_string(str(path), serde=_serde()) as saver:
        _graph(saver).invoke({"log": ["in"]}, _cfg("a"))
    out = subprocess.run(
        [sys.executable, "-m", "cpstore.cli", "lg-diff", "a", "a", "--store", str(path)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert out.returncode == 0, (out.returncode, out.stdout, out.stderr)
