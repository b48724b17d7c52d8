"""audit58: ``cpstore copy``'s clean-up never removes a store another process made in DEST.

The command notes whether DEST is new or empty before the copy (to clean up after a
child killed while writing it), and on any failure removed ``DEST/data.mdb`` and
``DEST/lock.mdb``. A copy refused because DEST is no longer empty -- another process
made a store there after that look (a runtime opening its new store in the folder the
operator named) -- wrote nothing, and the clean-up then removed that store's data
file. A refusal of DEST (InvalidInputError, raised before anything is written) now
removes nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import cpstore
from cpstore.cli import maintenance_commands
from cpstore.cli.entry import main
from cpstore.store.facade import Store

ROOT = Path(__file__).resolve().parents[1]

_MAKE = """
import sys, cpstore
with cpstore.open(sys.argv[1]) as store:
    rec = store.recorder("theirs")
    print(rec.checkpoint(0, {"made": "by another process"}))
    rec.close()
"""


def test_a_store_made_in_dest_after_the_look_survives_the_refused_copy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    src = str(tmp_path / "src")
    with cpstore.open(src) as store:
        rec = store.recorder("mine")
        rec.checkpoint(0, {"x": 1})
        rec.close()
    dest = tmp_path / "dest"
    dest.mkdir()  # empty when the command looks
    made: list[str] = []
    real = getattr(maintenance_commands, "copy_store")  # noqa: B009 - not exported

    def copy_after_another_process_made_a_store(store: Store, target: str, **kw: bool) -> object:
        # Another process makes its store in DEST between the command's look and the copy.
        done = subprocess.run(
            [sys.executable, "-c", _MAKE, target],
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        made.append(done.stdout.strip())
        return real(store, target, **kw)

    monkeypatch.setattr(maintenance_commands, "copy_store", copy_after_another_process_made_a_store)
    monkeypatch.setattr(maintenance_commands, "can_fork_for", lambda _store: False)
    code = main(["copy", str(dest), "--store", src])
    assert code == 3, capsys.readouterr()
    assert "new or empty folder" in capsys.readouterr().err
    assert sorted(os.listdir(dest)) == ["data.mdb", "lock.mdb"]  # [] before the fix
    with cpstore.open(str(dest), readonly=True) as theirs:
        assert theirs.ref("theirs") == made[0]
        report = theirs.verify()
        assert report.ok, report.problems
