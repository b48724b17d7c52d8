"""Disk full and read-only: a write that cannot land fails cleanly; what landed stays readable.

* a tiny map with growth disabled (``max_map_size == map_size``);
* a real 2 MiB tmpfs (needs root and mount(2); skipped cleanly otherwise),
  written in a child so a SIGBUS would show as a crash;
* ``readonly=True``, a read-only remount of that filesystem, and a chmod'ed
  folder (which does not bite when the tests run as root: said and checked).
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

import pytest

from cpstore.decision.table import Decision, FindingCode, Verdict, verdict_for
from cpstore.decision.validate import validate
from cpstore.errors import StoreFullError, StoreReadOnlyError
from cpstore.store.facade import open as open_store

if TYPE_CHECKING:
    from typing import Unpack


def _data_verdict(d: Decision) -> Verdict:
    """The verdict less BEST_EFFORT: a stored checkpoint used as P declares no replay mode."""
    return verdict_for([f for f in d.findings if f.code is not FindingCode.BEST_EFFORT])


MAP = 256 * 1024


def _fill(path: Path, *, map_size: int, max_map_size: int) -> tuple[list[str], StoreFullError]:
    """Checkpoint ever larger states until the store is full; (acknowledged ids, the error)."""
    acked: list[str] = []
    with open_store(path, map_size=map_size, max_map_size=max_map_size) as st:
        rec = st.recorder("run")
        rec.observe(0, "cfg", b"cfg", pinned_at=0.0)
        rec.effect("db", b"fx")
        for step in range(10_000):
            rec.tokens([("rng", step)])
            try:
                acked.append(rec.checkpoint(step, {"blob": os.urandom(20_000)}))
            except StoreFullError as exc:
                return acked, exc
            rec = st.recorder("run", parent=acked[-1])
    raise AssertionError("the store never filled up")


class _OpenOptions(TypedDict, total=False):
    """The open() options a consistency check reopens with."""

    map_size: int
    max_map_size: int
    readonly: bool


def _consistent(path: Path, acked: list[str], **options: Unpack[_OpenOptions]) -> None:
    with open_store(path, **options) as st:
        report = st.verify()
        assert report.ok, report.problems
        assert st.ref("run") == acked[-1]  # the failed checkpoint moved nothing
        for cid in acked:
            with st.read(cid) as cp:
                state = cp.state()
                assert isinstance(state, dict) and len(state["blob"]) == 20_000
        d = validate(acked[-1], acked[-1], store=st, record=False)
        assert _data_verdict(d) is Verdict.ACCEPT, d.findings


class TestMapFull:
    def test_a_full_map_fails_the_write_and_keeps_everything_before_it(
        self, tmp_path: Path
    ) -> None:
        """StoreFullError, nothing partial, verify ok, earlier checkpoints intact."""
        path = tmp_path / "s"
        acked, exc = _fill(path, map_size=MAP, max_map_size=MAP)
        assert acked and "full" in str(exc)
        _consistent(path, acked, map_size=MAP, max_map_size=MAP)

    def test_an_audit_append_on_a_full_map_fails_cleanly(self, tmp_path: Path) -> None:
        """Appending audit records past the limit raises StoreFullError; the chain holds."""
        path = tmp_path / "s"
        acked, _ = _fill(path, map_size=MAP, max_map_size=MAP)
        appended = 0
        with open_store(path, map_size=MAP, max_map_size=MAP) as st:
            with pytest.raises(StoreFullError):
                for i in range(100_000):
                    st.append_audit("note", {"i": i, "pad": "x" * 2000})
                    appended += 1
            report = st.verify()
            assert report.ok and report.counts["audit"] == appended
        _consistent(path, acked)  # a larger map (growth allowed) reopens it fine

    def test_growth_up_to_the_limit_then_full(self, tmp_path: Path) -> None:
        """With growth allowed to 4x, the map grows, then fails at the limit, consistently."""
        path = tmp_path / "s"
        acked, _ = _fill(path, map_size=MAP, max_map_size=4 * MAP)
        assert len(acked) > 0
        _consistent(path, acked, map_size=MAP, max_map_size=4 * MAP)


TMPFS_CHILD = r"""
import json, os, sys
from cpstore.errors import CpstoreError
from cpstore.store.facade import open as open_store
path = sys.argv[1]
acked, error, kind = [], None, None
with open_store(path) as st:
    rec = st.recorder("run")
    for step in range(100_000):
        try:
            acked.append(rec.checkpoint(step, {"blob": os.urandom(20_000)},
                                        ))
        except CpstoreError as exc:
            error, kind = str(exc), type(exc).__name__
            break
        rec = st.recorder("run", parent=acked[-1])
print(json.dumps({"acked": acked, "error": error, "kind": kind}))
"""


@contextlib.contextmanager
def _tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _fill_tmpfs(path: Path) -> dict[str, object]:
    child = subprocess.run(
        [sys.executable, "-c", TMPFS_CHILD, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert child.returncode == 0, (child.returncode, child.stderr[-2000:])  # no crash
    result: dict[str, object] = json.loads(child.stdout)
    assert result["error"] is not None and result["acked"], result
    return result


class TestRealDiskFull:
    def test_a_full_filesystem_raises_store_full(self, tmp_path: Path) -> None:
        """The error on a full disk is StoreFullError."""
        with _tmpfs(tmp_path / "mnt", "2m") as mnt:
            result = _fill_tmpfs(mnt / "s")
            assert result["kind"] == "StoreFullError", result["error"]

    def test_a_full_filesystem_fails_the_write_and_stays_consistent(self, tmp_path: Path) -> None:
        """On a 2 MiB tmpfs the writer gets a cpstore error, never a crash; then read-only."""
        with _tmpfs(tmp_path / "mnt", "2m") as mnt:
            path = mnt / "s"
            result = _fill_tmpfs(path)
            acked = result["acked"]
            assert isinstance(acked, list)
            _consistent(path, acked)
            # Read-only remount: still verifiable and validatable, writes refused.
            ro = subprocess.run(
                ["mount", "-o", "remount,ro", str(mnt)], capture_output=True, text=True, check=False
            )
            if ro.returncode != 0:
                pytest.skip(f"cannot remount read-only: {ro.stderr.strip()}")
            _consistent(path, acked, readonly=True)
            with pytest.raises(StoreReadOnlyError):
                open_store(path)


class TestReadOnly:
    def _store(self, path: Path) -> str:
        with open_store(path) as st:
            rec = st.recorder("run")
            rec.observe(0, "cfg", b"cfg", pinned_at=0.0)
            rec.effect("db", b"fx")
            cid = rec.checkpoint(0, {"a": 1})
            st.append_audit("note", {"x": 1})
            return cid

    def test_a_readonly_store_verifies_validates_and_refuses_writes(self, tmp_path: Path) -> None:
        """readonly=True: verify ok, validate(record=False) ACCEPT, every write refused."""
        cid = self._store(tmp_path / "s")
        with open_store(tmp_path / "s", readonly=True) as st:
            assert st.verify().ok
            assert _data_verdict(validate(cid, cid, store=st, record=False)) is Verdict.ACCEPT
            for write in (
                lambda: st.put_object(b"x"),
                lambda: st.append_audit("note", {}),
                lambda: st.recorder("run2").checkpoint(0, b"s"),
                lambda: validate(cid, cid, store=st),  # recording the decision is a write
            ):
                with pytest.raises(StoreReadOnlyError):
                    write()
            assert st.verify().counts["audit"] == 1

    def test_a_chmod_readonly_folder(self, tmp_path: Path) -> None:
        """Without write permission the store still verifies read-only; root ignores the chmod."""
        path = tmp_path / "s"
        cid = self._store(path)
        modes = {p: p.stat().st_mode for p in (path, path / "data.mdb", path / "lock.mdb")}
        try:
            for p in modes:
                p.chmod(
                    stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH | (stat.S_IXUSR if p.is_dir() else 0)
                )
            with open_store(path, readonly=True) as st:
                assert st.verify().ok
                assert _data_verdict(validate(cid, cid, store=st, record=False)) is Verdict.ACCEPT
            if os.geteuid() == 0:
                # root ignores permission bits: a writable open succeeds. Say so, don't pretend.
                with open_store(path) as st:
                    assert not st.readonly
            else:
                with pytest.raises(StoreReadOnlyError):
                    open_store(path)
        finally:
            for p, mode in modes.items():
                p.chmod(mode)
