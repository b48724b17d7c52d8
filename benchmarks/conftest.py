"""Shared benchmark options and the ratio table printed after a run.

``CPSTORE_BENCH_SIZE=quick`` (the default) keeps the whole core bench under
about a minute on two cores; ``full`` uses the sizes issue 2 names (10 M
records for the comparison). Benchmarks that put ``label``/``baseline``/
``items``/``target`` in ``extra_info`` appear in the table (see report.py).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from report import figures, table

SIZES = ("quick", "full")


def bench_size() -> str:
    """The size selected by CPSTORE_BENCH_SIZE (quick or full)."""
    size = os.environ.get("CPSTORE_BENCH_SIZE", "quick")
    if size not in SIZES:
        raise pytest.UsageError(f"CPSTORE_BENCH_SIZE must be one of {SIZES}, got {size!r}")
    return size


@pytest.fixture(scope="session")
def size() -> str:
    """The benchmark size for this run: "quick" or "full"."""
    return bench_size()


def pytest_report_header(config: pytest.Config) -> str:
    """Say which size the run uses."""
    return f"cpstore benchmarks: CPSTORE_BENCH_SIZE={bench_size()}"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Print every labelled figure beside its same-run baseline as a ratio."""
    session = getattr(config, "_benchmarksession", None)
    if session is None or not session.benchmarks:
        return
    rows = [
        {"name": b.name, "stats": {"median": b.stats.median}, "extra_info": b.extra_info}
        for b in session.benchmarks
        if b.stats is not None
    ]
    lines = table(rows)
    extra = figures(rows)
    if extra:
        lines = [*lines, "", *extra]
    if lines:
        terminalreporter.section(f"cpstore ratios (CPSTORE_BENCH_SIZE={bench_size()})")
        for line in lines:
            terminalreporter.write_line(line)
