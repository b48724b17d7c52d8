"""push/pull beside the *source's* retention (another process): a race is never called damage.

The transfer reads the source's lineage in one read txn and its objects afterwards
(cpstore/store/transfer.py); an object the source's prune swept in between is the named
race (a ConflictError), an object missing while a checkpoint reaching it stands is
damage (an IntegrityError). These tests pin what the classification must not get
wrong, with the other party a real process on LMDB and PostgreSQL sources.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures

import cpstore
from cpstore.errors import ConflictError, NotFoundError
from cpstore.store import transfer_objects
from cpstore.store.facade import Store
from cpstore.store.transfer import transfer

# The same run recorded again: checkpoint ids are content digests, so its ids recur.
_RECORD = r"""
import sys, cpstore
with cpstore.open(sys.argv[1]) as s:
    rec = s.recorder("run")
    for i in range(3):
        rec.observe(i, "cfg", b"payload %d" % i, pinned_at=1.0)
        rec.checkpoint(i, {"i": i, "blob": bytes(range(256)) * (8 + i)})
"""
_DELETE = "import sys, cpstore\nwith cpstore.open(sys.argv[1]) as s:\n    s.gc(delete_run='run')\n"


def _where(kind: str, tmp_path: Path, name: str, url: str) -> str:
    return str(tmp_path / name) if kind == "lmdb" else url.replace("schema=", f"schema={name}_")


def _run(script: str, *args: str) -> None:
    subprocess.run([sys.executable, "-c", script, *args], check=True, timeout=120)


@pytest.mark.parametrize("src_kind", ["lmdb", "pg"])
def test_an_object_swept_and_recorded_again_before_the_check_is_the_race_not_damage(
    src_kind: str, tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source deletes the run after step 1 (the fetch finds an object gone) and records
    it again, the same ids, before the transfer looks at why: the checkpoint stands and its
    object is there, so this is the race, not "the source lacks an object" (IntegrityError)
    on a source whose verify is clean."""
    src_at = _where(src_kind, tmp_path, "src", pg_url)
    _run(_RECORD, src_at)
    with cpstore.open(src_at) as src, cpstore.open(tmp_path / "dst") as dst:
        head = src.ref("run")
        assert head is not None
        fetch = transfer_objects._fetch
        raced: list[bool] = []

        def delete_then_fetch(*args: Any) -> Any:
            if raced:
                return fetch(*args)
            raced.append(True)
            _run(_DELETE, src_at)
            try:
                return fetch(*args)
            except NotFoundError:
                _run(_RECORD, src_at)  # before the transfer classifies what it met
                raise

        monkeypatch.setattr(transfer_objects, "_fetch", delete_then_fetch)
        with pytest.raises(ConflictError) as info:
            transfer(src.backend, dst.backend)
        assert "retention swept objects this transfer was copying" in info.value.what
        assert src.ref("run") == head and src.verify().ok  # nothing is damaged
        assert dst.runs() == [] and dst.verify().ok
        report = transfer(src.backend, dst.backend)
        assert report.refs_created == 1 and dst.ref("run") == head and dst.verify().ok


# Prunes every run r<k> to its head, and deletes the even ones, until told to stop.
# Runs the test records while this loop runs are odd, so only pruned, never deleted.
_SWEEP_LOOP = r"""
import os, sys, cpstore
path, stop = sys.argv[1], sys.argv[2]
swept = 0
with cpstore.open(path) as s:
    while not os.path.exists(stop):
        for run in s.runs():
            swept += s.gc(keep_last=1, run_id=run).objects_removed
            if int(run[1:]) % 2 == 0:
                swept += s.gc(delete_run=run).objects_removed
print(swept, flush=True)
"""


def _record_run(store: Store, run: str, steps: int, shared: list[bytes]) -> None:
    """A run whose checkpoints reach every kind of object: chunked and plain state
    parts, observation payloads (some shared with other runs), tokens, effects."""
    rec = store.recorder(run)
    for i in range(steps):
        for payload in shared:
            rec.observe(i, "cfg", payload, pinned_at=1.0)
        rec.token("rand", i)
        rec.effect("sink", b"effect %s %d" % (run.encode(), i))
        big = (b"%s %d " % (run.encode(), i)) * 2000  # over the tree threshold: chunked
        rec.checkpoint(i, {"i": i, "big": big, "small": b"s" * 300})


@pytest.mark.parametrize("src_kind", ["lmdb", "pg"])
def test_pushes_beside_a_process_pruning_the_source_land_whole_or_fail_with_the_named_race(
    src_kind: str, tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process prunes and deletes runs of the source nonstop beside 12 pushes (new runs
    recorded between them): each lands whole (the destination verifies, every head reads)
    or fails with the source-retention race named; a push after the sweeper stops lands."""
    src_at, stop = _where(src_kind, tmp_path, "src", pg_url), tmp_path / "stop"
    fetch = transfer_objects._fetch
    fetched: list[int] = []

    def counted(*args: Any) -> Any:
        fetched.append(len(args[1]))
        return fetch(*args)

    monkeypatch.setattr(transfer_objects, "_fetch", counted)
    with cpstore.open(src_at) as src:
        for k in range(24):
            _record_run(src, f"r{k}", 4, [b"shared %d" % (k // 3), b"own %d" % k])
        sweeper = subprocess.Popen(
            [sys.executable, "-c", _SWEEP_LOOP, src_at, str(stop)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        outcomes: list[str] = []
        try:
            for push in range(12):
                with cpstore.open(tmp_path / f"dst{push % 3}") as dst:
                    try:
                        transfer(src.backend, dst.backend, batch_objects=8)
                        outcomes.append("landed")
                    except ConflictError as exc:
                        assert "retention swept objects this transfer was copying" in exc.what
                        outcomes.append("race")
                    assert dst.verify().ok
                    for run in dst.runs():
                        with dst.latest(run) as cp:  # hash-checked, chunk trees walked
                            state = cp.state()
                            assert isinstance(state, dict) and state["big"].startswith(b"r")
                # odd: the sweeper deletes even runs, which could land mid-recording
                # and refuse the recorder's next checkpoint (the branch moved)
                _record_run(src, f"r{101 + 2 * push}", 3, [b"shared %d" % push])
        finally:
            stop.touch()
            out, err = sweeper.communicate(timeout=300)
        assert sweeper.returncode == 0, err
        assert int(out) > 0  # the sweeper really swept objects during the pushes
        with cpstore.open(tmp_path / "dst0") as dst:
            transfer(src.backend, dst.backend)  # nothing races it now
            assert dst.verify().ok
            assert set(src.runs()) <= set(dst.runs())
            for run in src.runs():
                assert dst.ref(run) == src.ref(run)
    assert len(fetched) > 12
    print(f"outcomes {outcomes}, swept {out.strip()}")
