"""push / pull between any two stores: what lands, idempotence, resuming after SIGKILL, refusals."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.cli import main
from cpstore.errors import ConflictError, IntegrityError, NotFoundError
from cpstore.store import transfer as transfer_module
from cpstore.store import transfer_objects
from cpstore.store.facade import Store
from cpstore.store.stats import store_stats
from cpstore.store.transfer import transfer

KINDS = ("lmdb", "pg")


def _where(kind: str, tmp_path: Path, name: str, url: str) -> str:
    return str(tmp_path / name) if kind == "lmdb" else url.replace("schema=", f"schema={name}_")


def _sample(store: Store, run: str = "run", steps: int = 8) -> str:
    """A run with every log, a fork branch, a sealed ledger and a chunked state."""
    rec = store.recorder(run)
    cid = ""
    for i in range(steps):
        rec.observe(i, "cfg", b"payload %d" % i, pinned_at=1.0)
        rec.tokens([("rng", i)])
        rec.effect("sink", b"effect %d" % i)
        big = bytes((i + j) % 251 for j in range(300_000)) if i == steps - 1 else b"small"
        cid = rec.checkpoint(i, {"messages": ["m"] * i, "blob": big})
    store.fork(run, "alt", cid)
    store.recorder(run, branch="alt").checkpoint(steps, {"alt": True})
    return cid


def _snapshot(store: Store) -> dict[str, Any]:
    """Every run's branches and, for each head's history, ids and states."""
    out: dict[str, Any] = {}
    for run in store.runs():
        for branch, head in store.branches(run).items():
            states = [(e.manifest.id, e.state) for e in store.history_states(run, branch)]
            out[f"{run}/{branch}"] = (head, states)
    return out


@pytest.mark.parametrize(("src_kind", "dst_kind"), [(a, b) for a in KINDS for b in KINDS])
def test_a_transfer_copies_every_run_whole_and_a_second_one_copies_nothing(
    src_kind: str, dst_kind: str, tmp_path: Path, pg_url: str
) -> None:
    """Embedded/PostgreSQL both ways: same heads, histories, states; verify clean; rerun no-op."""
    src_at = _where(src_kind, tmp_path, "src", pg_url)
    dst_at = _where(dst_kind, tmp_path, "dst", pg_url)
    with cpstore.open(src_at) as src, cpstore.open(dst_at) as dst:
        _sample(src)
        _sample(src, run="other", steps=2)
        first = transfer(src.backend, dst.backend)
        assert (first.refs_created, first.checkpoints) == (4, 12)
        assert first.objects > 0
        assert _snapshot(dst) == _snapshot(src)
        assert dst.verify().ok
        again = transfer(src.backend, dst.backend)
        assert (again.objects, again.checkpoints, again.refs_unchanged) == (0, 0, 4)


def test_new_checkpoints_move_the_ref_forward_and_copy_only_what_is_new(
    tmp_path: Path, pg_url: str
) -> None:
    """After more recording, a push moves the ref forward and sends only the new objects."""
    with cpstore.open(tmp_path / "a") as src, cpstore.open(pg_url) as dst:
        _sample(src, steps=3)
        transfer(src.backend, dst.backend)
        src.recorder("run").checkpoint(99, {"more": 1})
        second = transfer(src.backend, dst.backend)
        assert (second.refs_moved, second.checkpoints, second.refs_unchanged) == (1, 1, 1)
        assert second.objects <= 3
        assert dst.ref("run") == src.ref("run")


def test_one_run_is_pulled_alone_and_a_missing_run_is_not_found(
    tmp_path: Path, pg_url: str
) -> None:
    """--run copies that run's branches only; an unknown run is NotFoundError."""
    with cpstore.open(pg_url) as src, cpstore.open(tmp_path / "laptop") as dst:
        _sample(src, run="a", steps=2)
        _sample(src, run="b", steps=2)
        transfer(src.backend, dst.backend, run_id="b")
        assert dst.runs() == ["b"]
        with pytest.raises(NotFoundError):
            transfer(src.backend, dst.backend, run_id="nope")


def test_a_pruned_history_lands_with_its_tombstone(tmp_path: Path) -> None:
    """A source pruned to its newest checkpoints gives a destination that verifies clean."""
    with cpstore.open(tmp_path / "a") as src, cpstore.open(tmp_path / "b") as dst:
        rec = src.recorder("run")
        for i in range(6):
            rec.checkpoint(i, {"i": i})
        src.prune(keep_last=2)
        report = transfer(src.backend, dst.backend)
        assert report.checkpoints == 2
        assert len(dst.history("run")) == 2 and dst.verify().ok


def test_a_destination_branch_that_went_elsewhere_is_a_conflict_and_is_not_moved(
    tmp_path: Path,
) -> None:
    """Divergent heads: ConflictError naming the branch; its ref and checkpoints untouched."""
    with cpstore.open(tmp_path / "a") as src, cpstore.open(tmp_path / "b") as dst:
        src.recorder("run").checkpoint(1, {"src": 1})
        src.recorder("free").checkpoint(1, {"x": 1})
        theirs = dst.recorder("run").checkpoint(1, {"dst": 1})
        with pytest.raises(ConflictError) as err:
            transfer(src.backend, dst.backend)
        assert "run/main" in str(err.value)
        assert dst.ref("run") == theirs and len(dst.history("run")) == 1
        assert dst.ref("free") == src.ref("free")  # the other branches still land


def test_a_diverged_branch_does_not_keep_shared_history_from_a_branch_that_lands(
    tmp_path: Path,
) -> None:
    """A diverged branch lands nothing; a later branch sharing its history still lands it all."""
    with cpstore.open(tmp_path / "a") as src, cpstore.open(tmp_path / "b") as dst:
        rec = src.recorder("run")
        shared = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        src.fork("run", "alt", shared[-1])  # "run\0alt" lands before "run\0main"
        src.recorder("run", branch="alt").checkpoint(3, {"alt": True})
        dst.recorder("run", branch="alt").checkpoint(1, {"dst": 1})  # alt went elsewhere
        with pytest.raises(ConflictError, match="run/alt"):
            transfer(src.backend, dst.backend)
        assert dst.ref("run") == shared[-1]
        assert [e.id for e in dst.history("run")] == shared[::-1]
        assert dst.verify().ok


_GC = "import sys, cpstore\nwith cpstore.open(sys.argv[1]) as s:\n    s.gc(keep_last=1)\n"


def test_a_head_the_destination_prunes_during_the_transfer_gets_no_ref(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process prunes the checkpoint a new branch names mid-transfer: no dangling ref."""
    with cpstore.open(tmp_path / "a") as src, cpstore.open(tmp_path / "b") as dst:
        rec = src.recorder("run")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        transfer(src.backend, dst.backend)
        src.fork("run", "alt", ids[1])  # the destination has ids[1], as a non-head
        copy = transfer_objects._copy_objects

        def gc_then_copy(*args: Any, **kwargs: Any) -> None:
            # After the destination's checkpoints were read, before any ref is written.
            subprocess.run([sys.executable, "-c", _GC, str(tmp_path / "b")], check=True)
            copy(*args, **kwargs)

        monkeypatch.setattr(transfer_module, "_copy_objects", gc_then_copy)
        with pytest.raises(ConflictError, match="pruned"):
            transfer(src.backend, dst.backend)
        assert "alt" not in dst.branches("run")
        assert dst.verify().ok


def test_an_object_damaged_in_transit_is_refused_at_the_receiver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes that do not hash to their key never land, and no ref moves."""
    with cpstore.open(tmp_path / "a") as src, cpstore.open(tmp_path / "b") as dst:
        _sample(src, steps=2)
        real = src.backend.get_objects

        def flip(keys: list[bytes], *, verify: bool) -> list[bytes]:
            return [bytes([d[0] ^ 1]) + d[1:] if d else b"x" for d in real(keys, verify=verify)]

        monkeypatch.setattr(src.backend, "get_objects", flip)
        with pytest.raises(IntegrityError):
            transfer(src.backend, dst.backend)
        assert dst.runs() == [] and store_stats(dst).objects == 0


_KILLED_PUSH = """
import sys, time
import cpstore
from cpstore.store import transfer as t
src, dst = sys.argv[1], sys.argv[2]
with cpstore.open(src, readonly=True) as s, cpstore.open(dst) as d:
    real = d.backend.put_objects
    def slow(batch):
        real(batch)
        print("batch", flush=True)
        time.sleep(0.05)
    d.backend.put_objects = slow
    t.transfer(s.backend, d.backend, batch_objects=4)
print("done", flush=True)
"""


@pytest.mark.parametrize("dst_kind", KINDS)
def test_a_push_killed_by_sigkill_leaves_no_dangling_ref_and_the_next_one_finishes(
    dst_kind: str, tmp_path: Path, pg_url: str
) -> None:
    """SIGKILL between object batches: verify clean, no ref yet; a second push completes it."""
    src_at = str(tmp_path / "src")
    dst_at = _where(dst_kind, tmp_path, "dst", pg_url)
    with cpstore.open(src_at) as src:
        rec = src.recorder("run")
        for i in range(30):
            rec.observe(i, "cfg", os.urandom(64), pinned_at=1.0)
            rec.checkpoint(i, {"blob": os.urandom(512)})
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_PUSH, src_at, dst_at], stdout=subprocess.PIPE, text=True
    )
    assert child.stdout is not None
    batches = 0
    while batches < 3:
        line = child.stdout.readline()
        assert line, "the push ended before it could be killed"
        batches += line.startswith("batch")
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    with cpstore.open(dst_at) as dst:
        assert dst.runs() == []  # objects landed, no ref (nor checkpoint) yet
        assert dst.verify().ok
        with cpstore.open(src_at, readonly=True) as src:
            report = transfer(src.backend, dst.backend)
            assert report.refs_created == 1 and report.checkpoints == 30
            assert _snapshot(dst) == _snapshot(src) and dst.verify().ok


def test_push_and_pull_commands_copy_and_report(
    tmp_path: Path, pg_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """cpstore push DEST --store SRC and cpstore pull SOURCE --store DEST, --json figures."""
    local = str(tmp_path / "local")
    with cpstore.open(local) as src:
        _sample(src, steps=2)
    assert main(["push", pg_url, "--store", local, "--json"]) == 0
    out = capsys.readouterr().out
    assert '"refs_created": 2' in out and '"checkpoints": 3' in out
    assert main(["push", pg_url, "--store", local]) == 0
    assert "0 checkpoint(s), 0 object(s)" in capsys.readouterr().out
    laptop = str(tmp_path / "laptop")
    assert main(["pull", pg_url, "--run", "run", "--store", laptop]) == 0
    with cpstore.open(laptop) as mine, cpstore.open(local) as theirs:
        assert _snapshot(mine) == _snapshot(theirs)
    assert main(["pull", str(tmp_path / "nothing-here"), "--store", laptop]) == 4
    assert not (tmp_path / "nothing-here").exists()


def test_a_head_behind_the_sources_pruned_root_is_refused_not_moved(tmp_path: Path) -> None:
    """A destination head the source pruned past cannot be shown an ancestor: ConflictError,
    the destination unchanged and whole (a refusal, never a ref moved on an unproven claim)."""
    with cpstore.open(tmp_path / "a") as a, cpstore.open(tmp_path / "b") as b:
        rec = a.recorder("r")
        for i in range(3):
            rec.checkpoint(i, {"i": i})
        transfer(a.backend, b.backend, run_id="r")
        old = b.ref("r")
        for i in range(3, 9):
            rec.checkpoint(i, {"i": i})
        assert a.prune(keep_last=3) == 6
        with pytest.raises(ConflictError) as caught:
            transfer(a.backend, b.backend, run_id="r")
        assert caught.value.got == ["r/main"]
        assert b.ref("r") == old and b.verify().ok
