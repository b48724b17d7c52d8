"""``cpstore lg-diff`` on threads it cannot tell apart: exit 11, never 0, and no "A: None".

lgsub80 made ``diff_threads`` answer ``undecidable`` (not the same) for values sealed by
an encrypting serde it is not given; the command takes no serde, so on such threads it
said "diverge" by its exit code (12, a proven divergence) and printed ``A: None`` and
``B: None``. It now exits 11, the code a validation gives when equivalence cannot be
proven (QUARANTINE), and prints only the checkpoints it names."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from test_lgsub80_diff_cipher import _run, _serde

from cpstore.langgraph import CpstoreSaver


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "cpstore.cli", *args], capture_output=True, text=True, check=False
    )


def test_sealed_threads_exit_11_with_the_reason(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with CpstoreSaver.from_conn_string(str(path), serde=_serde()) as saver:
        _run(saver)
    out = _cli("lg-diff", "a", "b", "--store", str(path))
    assert out.returncode == 11, (out.returncode, out.stderr)
    assert "serde" in out.stdout and "None" not in out.stdout, out.stdout
    as_json = _cli("lg-diff", "a", "b", "--store", str(path), "--json")
    assert as_json.returncode == 11
    found = json.loads(as_json.stdout)
    assert found["undecidable"] is True and found["same"] is False


def test_plain_threads_keep_their_codes(tmp_path: Path) -> None:
    path = tmp_path / "store"
    with CpstoreSaver.from_conn_string(str(path)) as saver:
        _run(saver, values=True)
    out = _cli("lg-diff", "a", "b", "--store", str(path))
    assert out.returncode == 12, out.stderr
    assert "  A: " in out.stdout and "  B: " in out.stdout and "None" not in out.stdout
    assert _cli("lg-diff", "a", "a", "--store", str(path)).returncode == 0
