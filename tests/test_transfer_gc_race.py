"""push/pull beside the destination's gc: objects swept before their checkpoint lands are re-sent.

A transfer copies objects first and lands the checkpoints naming them later; a gc of
the destination in between sweeps them (nothing names them yet). The landing txn
finds them gone, rolls back, fetches them again and writes them in the next landing
txn itself; a race that persists is a ConflictError naming it, never a partial branch
or an IntegrityError that suggests damage.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError, IntegrityError
from cpstore.store import transfer as transfer_module
from cpstore.store import transfer_objects
from cpstore.store.facade import Store
from cpstore.store.pg_open import parse_url
from cpstore.store.transfer import transfer

_DELETE_RUN = (
    "import sys, cpstore\nwith cpstore.open(sys.argv[1]) as s:\n    s.gc(delete_run=sys.argv[2])\n"
)

# Deletes every run named local-*: what the objects it alone named are swept with.
_GC_LOOP = r"""
import os, sys, cpstore
path, stop = sys.argv[1], sys.argv[2]
swept = 0
with cpstore.open(path) as s:
    while not os.path.exists(stop):
        for run in s.runs():
            if run.startswith("local-"):
                swept += s.gc(delete_run=run).objects_removed
print(swept, flush=True)
"""


def _where(kind: str, tmp_path: Path, name: str, url: str) -> str:
    return str(tmp_path / name) if kind == "lmdb" else url.replace("schema=", f"schema={name}_")


def _pool(n: int, tag: str) -> list[bytes]:
    return [b"shared %s %d" % (tag.encode(), k) for k in range(n)]


def _record(store: Store, run: str, steps: range, shared: list[bytes]) -> str:
    """Checkpoints observing the ``shared`` payloads (objects another run may also name)."""
    rec = store.recorder(run)
    cid = ""
    for i in steps:
        for payload in shared:
            rec.observe(i, "cfg", payload, pinned_at=1.0)
        rec.effect("sink", b"effect %d" % i)
        cid = rec.checkpoint(i, {"i": i, "blob": os.urandom(2000)})
    return cid


def _gc_after_copy(monkeypatch: pytest.MonkeyPatch, dst_at: str, run: str) -> None:
    """Delete ``run`` of the destination in another process after the copy, before landing."""
    copy = transfer_objects._copy_objects

    def copy_then_gc(*args: Any, **kwargs: Any) -> None:
        copy(*args, **kwargs)
        subprocess.run([sys.executable, "-c", _DELETE_RUN, dst_at, run], check=True, timeout=60)

    monkeypatch.setattr(transfer_module, "_copy_objects", copy_then_gc)


@pytest.mark.parametrize("dst_kind", ["lmdb", "pg"])
def test_objects_swept_before_landing_are_resent_and_the_branch_lands_whole(
    dst_kind: str, tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Objects the destination had (so not copied) swept before landing: re-sent, lands whole."""
    dst_at = _where(dst_kind, tmp_path, "dst", pg_url)
    shared = _pool(6, "x")
    with cpstore.open(tmp_path / "src") as src, cpstore.open(dst_at) as dst:
        head = _record(src, "run", range(4), shared)
        _record(dst, "local-old", range(1), shared)  # the destination names them too
        _gc_after_copy(monkeypatch, dst_at, "local-old")
        report = transfer(src.backend, dst.backend)
        assert report.refs_created == 1 and report.checkpoints == 4
        assert dst.runs() == ["run"] and dst.ref("run") == head
        assert [m.id for m in dst.history("run")] == [m.id for m in src.history("run")]
        with dst.read(head) as cp, src.read(head) as want:
            assert cp.state() == want.state()
            assert cp.observations() == want.observations()
        assert dst.verify().ok


def test_a_race_that_persists_is_a_conflict_naming_it_and_nothing_lands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When every re-send is swept again, the branch fails with the gc race named; no ref."""
    dst_at = str(tmp_path / "dst")
    shared = _pool(6, "x")
    with cpstore.open(tmp_path / "src") as src, cpstore.open(dst_at) as dst:
        _record(src, "run", range(3), shared)
        _record(dst, "local-old", range(1), shared)
        _gc_after_copy(monkeypatch, dst_at, "local-old")
        resend = transfer_objects._resend

        def swept_again(*args: Any, **kwargs: Any) -> None:
            resend(*args, **kwargs)
            kwargs["carry"].clear()  # as if each re-send were swept before it landed

        monkeypatch.setattr(transfer_module, "_resend", swept_again)
        with pytest.raises(ConflictError) as info:
            transfer(src.backend, dst.backend)
        assert "gc swept objects this transfer copied" in info.value.what
        assert info.value.where == "refs/run/main"
        assert dst.runs() == [] and dst.ref("run") is None
        assert dst.verify().ok


def test_repeated_pulls_racing_a_gc_loop_land_whole_or_fail_with_the_named_race(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process deleting runs of the destination nonstop beside 12 pulls: whole or named race."""
    dst_at, stop = str(tmp_path / "dst"), tmp_path / "stop"
    with cpstore.open(tmp_path / "src") as src, cpstore.open(dst_at) as dst:
        put = dst.backend.put_objects

        def put_then_pause(batch: Any) -> None:
            put(batch)
            time.sleep(0.02)  # widen the window between a copy and its landing

        monkeypatch.setattr(dst.backend, "put_objects", put_then_pause)
        resends: list[int] = []
        resend = transfer_objects._resend

        def counted(*args: Any, **kwargs: Any) -> None:
            resends.append(len(args[2]))
            resend(*args, **kwargs)

        monkeypatch.setattr(transfer_module, "_resend", counted)
        sweeper = subprocess.Popen(
            [sys.executable, "-c", _GC_LOOP, dst_at, str(stop)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        outcomes = []
        try:
            for pull in range(12):
                shared = _pool(40, str(pull))
                # The destination names this pull's shared payloads in a run the
                # sweeper deletes: present when the pull looks, maybe gone when it lands.
                _record(dst, f"local-{pull}", range(1), shared)
                head = _record(src, "run", range(2 * pull, 2 * pull + 2), shared)
                try:
                    transfer(src.backend, dst.backend, batch_objects=4)
                except ConflictError as exc:
                    assert "gc swept objects this transfer copied" in exc.what, exc
                    assert dst.ref("run") != head  # nothing of the branch landed
                    outcomes.append("race")
                    continue
                assert dst.ref("run") == head
                with dst.read(head) as cp:  # hash-checked: every object it names is there
                    state = cp.state()
                    assert isinstance(state, dict) and state["i"] == 2 * pull + 1
                    assert len(cp.observations()) == 40 * (2 * pull + 2)
                outcomes.append("landed")
        finally:
            stop.touch()
            out, err = sweeper.communicate(timeout=120)
        assert sweeper.returncode == 0, err
        assert int(out) > 0  # the sweeper really removed objects during the pulls
        assert "landed" in outcomes
        assert dst.verify().ok
        print(f"outcomes {outcomes}, re-sent {resends}, swept {out.strip()}")


_PRUNE = "import sys, cpstore\nwith cpstore.open(sys.argv[1]) as s:\n    s.gc(keep_last=1)\n"


@pytest.mark.parametrize("src_kind", ["lmdb", "pg"])
def test_objects_the_sources_retention_swept_mid_transfer_are_a_named_race_not_not_found(
    src_kind: str, tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source prunes (another process) after the transfer read its lineage, before the
    objects are read: a ConflictError naming the race, nothing lands; a rerun finishes.

    Before: a bare NotFoundError "object not in the store" (met by the chaos test's pushes
    beside the worker's own prune), which reads as a lost object rather than a race.
    """
    src_at = _where(src_kind, tmp_path, "src", pg_url)
    with cpstore.open(src_at) as src, cpstore.open(tmp_path / "dst") as dst:
        head = _record(src, "run", range(4), [])
        fetch = transfer_objects._fetch
        pruned: list[bool] = []

        def prune_first(*args: Any) -> Any:
            if not pruned:
                subprocess.run([sys.executable, "-c", _PRUNE, src_at], check=True, timeout=60)
                pruned.append(True)
            return fetch(*args)

        monkeypatch.setattr(transfer_objects, "_fetch", prune_first)
        with pytest.raises(ConflictError) as info:
            transfer(src.backend, dst.backend)
        assert "retention swept objects this transfer was copying" in info.value.what
        assert info.value.where is not None and info.value.where.startswith("objects/")
        assert dst.runs() == [] and dst.ref("run") is None
        assert dst.verify().ok
        report = transfer(src.backend, dst.backend)  # the pruned lineage: the head alone
        assert report.refs_created == 1 and report.checkpoints == 1
        assert dst.ref("run") == head and dst.verify().ok
        with dst.read(head) as cp, src.read(head) as want:
            assert cp.state() == want.state()


def test_an_object_missing_while_its_checkpoint_stands_is_damage_not_a_race(
    tmp_path: Path, pg_url: str
) -> None:
    """A source object gone while a stored checkpoint still reaches it (deleted in SQL) is an
    IntegrityError naming that checkpoint, not the retention race's ConflictError."""
    with cpstore.open(pg_url) as src, cpstore.open(tmp_path / "dst") as dst:
        head = _record(src, "run", range(2), [b"payload"])
        ids = [m.id for m in src.history("run")]
        with src.read(head) as cp:
            key = bytes.fromhex(cp.observations()[0][2])  # the payload both checkpoints name
        with psycopg.connect(parse_url(pg_url).conninfo, autocommit=True) as conn:
            conn.execute(f'DELETE FROM "{parse_url(pg_url).schema}".objects WHERE k = %s', (key,))
        with pytest.raises(IntegrityError) as info:
            transfer(src.backend, dst.backend)
        assert "lacks an object a stored checkpoint reaches" in info.value.what
        assert info.value.where == f"objects/{key.hex()}"
        assert info.value.expected in {f"an object checkpoint {c} reaches" for c in ids}
        assert dst.runs() == [] and dst.ref("run") is None
