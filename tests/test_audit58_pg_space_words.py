"""audit58: `cpstore gc` and `cpstore stats` on a PostgreSQL store do not point at compact.

After a sweep, `gc` printed "data file X -> Y (LMDB reuses freed pages ... and never
shrinks the file) ... cpstore compact shrinks the file", and `stats` "(freed by gc;
compact shrinks)", also for a `postgresql://` store, where `cpstore compact` is refused
("a PostgreSQL store's space is the server's to give back"): the operator was sent to
a command that cannot run. On PostgreSQL the lines now say what is true there (the
tables' size on the server; deleted rows' space is reused after (auto)vacuum, VACUUM
FULL gives it back); on LMDB they are as before.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore

ROOT = Path(__file__).resolve().parents[1]


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cpstore.cli", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_gc_and_stats_name_the_way_this_backend_gives_space_back(url: str) -> None:
    with cpstore.open(url) as store:
        rec = store.recorder("r")
        for step in range(4):
            rec.checkpoint(step, {"step": step})
        rec.close()
    gc = _cli("gc", "--keep-last", "1", "--store", url)
    stats = _cli("stats", "--store", url)
    assert (gc.returncode, stats.returncode) == (0, 0), (gc.stderr, stats.stderr)
    assert gc.stdout.startswith("removed 3 checkpoint(s)"), gc.stdout
    said = gc.stdout + stats.stdout
    if url.startswith("postgresql://"):
        assert "compact" not in said and "LMDB" not in said, said
        assert "VACUUM" in gc.stdout and "vacuum" in stats.stdout, said
        assert "tables" in gc.stdout and "tables" in stats.stdout, said
    else:
        assert "cpstore compact shrinks the file" in gc.stdout, gc.stdout
        assert "compact shrinks" in stats.stdout, stats.stdout
