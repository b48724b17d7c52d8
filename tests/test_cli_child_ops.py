"""`compact` and `copy` walk every page of the store, as `verify` does: a page that kills
liblmdb (LMDB 0.9 has no page checksums: an assertion abort or a fault) killed the
command itself with no word (exit -6). They now run their work in a child process
(cpstore/cli/child.py), as verify does: exit 5 in one line naming the phase, nothing
swapped, no copy left. Here the abort is put where liblmdb would die: in the compaction
copy and in the hot copy."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import cpstore
from cpstore import cli

_ABORT = (
    "import os, sys\n"
    "from cpstore import cli\n"
    "import cpstore.store.maintenance as m\n"
    "from cpstore.store.lmdb_backend import LmdbBackend\n"
    "m.compact_in_place = lambda *a, **k: os.abort()\n"
    "LmdbBackend.copy_to = lambda self, *a, **k: os.abort()\n"
    "sys.exit(cli.main(sys.argv[1:]))\n"
)


def _store(path: Path) -> str:
    with cpstore.open(path) as store:
        rec = store.recorder("r")
        rec.token("rng", 7)
        rec.checkpoint(1, {"memory": "hello"})
        rec.checkpoint(2, {"memory": "hello", "plan": [1, 2]})
    return hashlib.sha256((path / "data.mdb").read_bytes()).hexdigest()


def _cli(*argv: str, script: str = _ABORT) -> subprocess.CompletedProcess[str]:
    """The command line ``argv`` run by ``script`` (which plants a fault first)."""
    return subprocess.run(
        [sys.executable, "-c", script, *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_compact_survives_liblmdb_dying_in_its_copy(tmp_path: Path) -> None:
    path = tmp_path / "s"
    before = _store(path)
    proc = _cli("compact", "--store", str(path))
    assert proc.returncode == cli.EXIT_INTEGRITY, (proc.returncode, proc.stderr)
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "liblmdb died with SIGABRT compacting it" in proc.stderr, proc.stderr
    assert hashlib.sha256((path / "data.mdb").read_bytes()).hexdigest() == before
    assert sorted(os.listdir(path)) == ["data.mdb", "lock.mdb"]
    with cpstore.open(path, readonly=True) as store:
        assert store.verify().ok


def test_copy_survives_liblmdb_dying_in_its_copy(tmp_path: Path) -> None:
    path, dest = tmp_path / "s", tmp_path / "copy"
    before = _store(path)
    proc = _cli("copy", str(dest), "--store", str(path))
    assert proc.returncode == cli.EXIT_INTEGRITY, (proc.returncode, proc.stderr)
    assert len(proc.stderr.splitlines()) == 1, proc.stderr
    assert "liblmdb died with SIGABRT copying it" in proc.stderr, proc.stderr
    assert hashlib.sha256((path / "data.mdb").read_bytes()).hexdigest() == before
    assert not dest.exists() or not any(dest.iterdir())


def test_compact_and_copy_report_and_errors_pass_through_the_child(tmp_path: Path) -> None:
    """The child's report (JSON counts) and its errors (a copy onto itself: exit 3) reach
    the command as when it ran in process."""
    path = tmp_path / "s"
    _store(path)
    proc = subprocess.run(
        [sys.executable, "-m", "cpstore.cli.entry", "copy", str(path), "--store", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == cli.EXIT_BAD_INPUT and "onto itself" in proc.stderr, proc.stderr
    for argv in (
        ["compact", "--json", "--store", str(path)],
        ["copy", str(tmp_path / "c"), "--json", "--store", str(path)],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "cpstore.cli.entry", *argv],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, proc.stderr
        assert '"checkpoints": 2' in proc.stdout, proc.stdout


_BUG = (
    "import sys\n"
    "from cpstore import cli\n"
    "import cpstore.store.maintenance as m\n"
    "def bug(*a, **k):\n"
    "    raise ZeroDivisionError('planted bug in the child')\n"
    "m.compact_in_place = bug\n"
    "sys.exit(cli.main(sys.argv[1:]))\n"
)


def test_a_bug_in_the_child_is_exit_1_with_its_traceback_as_in_process(tmp_path: Path) -> None:
    """An exception no command raises on purpose is a bug: in process Python prints its
    traceback and exits 1; from the child it was 'ended without a result' (exit 7, store
    unavailable), which sends an operator after the store instead of the bug."""
    path = tmp_path / "s"
    before = _store(path)
    proc = _cli("compact", "--store", str(path), script=_BUG)
    assert proc.returncode == cli.EXIT_INTERNAL, (proc.returncode, proc.stderr)
    assert "ZeroDivisionError: planted bug in the child" in proc.stderr, proc.stderr
    assert "Traceback" in proc.stderr and "ended without a result" not in proc.stderr
    assert hashlib.sha256((path / "data.mdb").read_bytes()).hexdigest() == before
