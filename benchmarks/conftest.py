"""Shared benchmark options and the ratio table printed after a run.

``CPSTORE_BENCH_SIZE=quick`` (the default) keeps the whole core bench under
about a minute on two cores; ``full`` uses the sizes issue 2 names (10 M
records for the comparison). Benchmarks that put ``label``/``baseline``/
``items``/``target`` in ``extra_info`` appear in the table (see report.py).
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from report import figures, interleaved, table

SIZES = ("quick", "full")


def bench_size() -> str:
    """The size selected by CPSTORE_BENCH_SIZE (quick or full)."""
    size = os.environ.get("CPSTORE_BENCH_SIZE", "quick")
    if size not in SIZES:
        raise pytest.UsageError(f"CPSTORE_BENCH_SIZE must be one of {SIZES}, got {size!r}")
    return size


#: Packages whose versions every benchmark records (absent ones are "-").
PACKAGES = (
    "cpstore",
    "lmdb",
    "msgpack",
    "xxhash",
    "pytest-benchmark",
    "langgraph",
    "langgraph-checkpoint",
    "langgraph-checkpoint-lmdb",
    "langgraph-checkpoint-sqlite",
    "langgraph-checkpoint-postgres",
    "psycopg",
    "psycopg-pool",
)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def environment() -> dict[str, str]:
    """The machine, its load and every package version this run used."""
    env = {
        "python": platform.python_version(),
        "machine": f"{_cpu_model()}, {os.cpu_count()} cpus, "
        f"{platform.system()} {platform.release()}",
        "sqlite": __import__("sqlite3").sqlite_version,
    }
    if hasattr(os, "getloadavg"):
        env["loadavg_at_start"] = " ".join(f"{x:.2f}" for x in os.getloadavg())
    for name in PACKAGES:
        try:
            env[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            env[name] = "-"
    return env


ENVIRONMENT = environment()


@pytest.fixture(autouse=True)
def _record_environment(request: pytest.FixtureRequest) -> None:
    """Store the machine and versions in every benchmark's extra_info."""
    if "benchmark" in request.fixturenames:
        request.getfixturevalue("benchmark").extra_info["environment"] = ENVIRONMENT


@pytest.fixture(scope="session")
def size() -> str:
    """The benchmark size for this run: "quick" or "full"."""
    return bench_size()


def pytest_report_header(config: pytest.Config) -> str:
    """Say which size the run uses."""
    versions = ", ".join(f"{k} {v}" for k, v in ENVIRONMENT.items())
    return f"cpstore benchmarks: CPSTORE_BENCH_SIZE={bench_size()}; {versions}"


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Print every labelled figure beside its same-run baseline as a ratio."""
    session = getattr(config, "_benchmarksession", None)
    if session is None or not session.benchmarks:
        return
    rows = [
        {"name": b.name, "stats": {"median": b.stats.median}, "extra_info": b.extra_info}
        for b in session.benchmarks
        # A benchmark that failed mid-run has stats but no rounds.
        if b.stats is not None and b.stats.data
    ]
    lines = table(rows)
    for extra in (figures(rows), interleaved(rows)):
        if extra:
            lines = [*lines, "", *extra] if lines else extra
    if lines:
        terminalreporter.section(f"cpstore ratios (CPSTORE_BENCH_SIZE={bench_size()})")
        for line in lines:
            terminalreporter.write_line(line)
        terminalreporter.write_line("")
        versions = "; ".join(f"{k} {v}" for k, v in ENVIRONMENT.items())
        terminalreporter.write_line(f"environment: {versions}")
        if hasattr(os, "getloadavg"):
            load = " ".join(f"{x:.2f}" for x in os.getloadavg())
            terminalreporter.write_line(f"loadavg at end: {load}")
