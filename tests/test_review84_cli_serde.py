"""review84: ``cpstore lg-diff --serde`` with a serde that calls ``sys.exit()``.

lgdiff83 turned a ``SystemExit`` raised while importing the module, looking up the
attribute or calling the factory into exit 3 in one line; one raised by the serde's own
``loads_typed`` while the threads were compared left the process with the serde's code
and nothing on stderr (here exit 4, "not found", for threads that exist). Now exit 3,
one line naming the ``SystemExit``. Both engines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from pg_cluster import backend_url  # noqa: F401 - fixture
from test_lgsub80_diff_cipher import _run

from cpstore.langgraph import CpstoreSaver

_EXITS = """
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer


class Exits(JsonPlusSerializer):
    def loads_typed(self, data):
        raise SystemExit(4)
"""


def test_a_serde_exiting_while_it_decodes_is_one_line_and_exit_3(url: str, tmp_path: Path) -> None:
    (tmp_path / "lgexits84.py").write_text(_EXITS)
    with CpstoreSaver.from_conn_string(url) as saver:
        _run(saver)
    out = subprocess.run(
        [sys.executable, "-m", "cpstore.cli", "lg-diff", "a", "b", "--store", url,
         "--serde", "lgexits84:Exits"],
        capture_output=True, text=True, check=False, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parent)},
    )  # fmt: skip
    assert out.returncode == 3, (out.returncode, out.stdout, out.stderr)  # before: 4, silent
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in out.stderr, out.stderr
    assert lines[0].startswith("cpstore lg-diff: --serde lgexits84:Exits: decoding with it")
    assert "raised SystemExit" in lines[0], lines[0]
