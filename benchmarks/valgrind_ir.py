"""Instructions a benchmark script's child run executes, counted by valgrind.

The ``ir_*.py`` scripts run themselves under cachegrind (no cache simulation) with a
``--child`` argument list, twice with different pass counts, and take the difference:
the process start, imports and set-up cancel out. ``PYTHONHASHSEED=0`` keeps the counts
repeatable. Needs ``valgrind`` (``apt-get install valgrind``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys


def instructions(script: str, *child_args: str) -> int:
    """The instruction count of ``python script --child *child_args`` under cachegrind."""
    out = subprocess.run(
        [
            "valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
            sys.executable, script, "--child", *child_args,
        ],
        capture_output=True, text=True, check=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )  # fmt: skip
    found = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {out.stderr[-500:]}")
    return int(found.group(1).replace(",", ""))
