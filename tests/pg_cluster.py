"""A throwaway PostgreSQL cluster for the tests: initdb + pg_ctl on a temporary directory.

The server binaries come from the distribution's PostgreSQL server package
(``./dev setup`` installs it when initdb is missing; ``CPSTORE_PG_BIN`` names
another folder). The cluster listens on a Unix socket only, in its own
directory; as root the server runs as the ``postgres`` system user. One
cluster per test process (:func:`cluster`), stopped at exit; every test gets
its own schema (:func:`fresh_url`), so tests never see each other's store.
The fault tests stop and start it (:meth:`Cluster.restart`).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

import cpstore.store as cpstore_store
from cpstore.store import Store

__all__ = [
    "Cluster",
    "backend_store",
    "backend_url",
    "cluster",
    "fresh_url",
    "pg_bin",
    "pg_cluster",
    "pg_url",
]


def pg_bin() -> str:
    """The folder holding initdb and pg_ctl (the newest installed server package)."""
    given = os.environ.get("CPSTORE_PG_BIN")
    if given:
        return given
    found = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(p.split("/")[4]) if p.split("/")[4].isdigit() else 0,
    )
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    if initdb:
        return os.path.dirname(initdb)
    raise RuntimeError(
        "PostgreSQL server binaries (initdb, pg_ctl) not found: run ./dev setup, which "
        "installs the postgresql package, or set CPSTORE_PG_BIN"
    )


def _as_server_user(args: list[str]) -> list[str]:
    """``args`` run as the postgres system user when we are root (the server refuses root)."""
    if os.geteuid() == 0:
        return ["runuser", "-u", "postgres", "--", *args]
    return args


@dataclass
class Cluster:
    """One running throwaway cluster."""

    root: str
    bin: str

    @property
    def data(self) -> str:
        return os.path.join(self.root, "data")

    @property
    def socket_dir(self) -> str:
        return os.path.join(self.root, "sock")

    def url(self, schema: str | None = None, **params: str) -> str:
        """A store URL on this cluster (``schema`` appended when given)."""
        query = f"host={self.socket_dir}"
        if schema is not None:
            query += f"&schema={schema}"
        for k, v in params.items():
            query += f"&{k}={v}"
        return f"postgresql://postgres@/postgres?{query}"

    def _pg_ctl(self, *args: str) -> None:
        cmd = _as_server_user([os.path.join(self.bin, "pg_ctl"), "-D", self.data, *args])
        subprocess.run(cmd, check=True, capture_output=True, timeout=60)

    def start(self) -> None:
        options = f"-k {self.socket_dir} -c listen_addresses='' -c max_connections=200"
        log = os.path.join(self.root, "server.log")
        self._pg_ctl("-w", "-l", log, "-o", options, "start")

    def stop(self, mode: str = "fast") -> None:
        self._pg_ctl("-w", "-m", mode, "stop")

    def restart(self, mode: str = "immediate") -> None:
        """Stop (``immediate``: as a crash, no checkpoint, WAL replay on start) and start."""
        self.stop(mode)
        self.start()

    def destroy(self) -> None:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)


def _make() -> Cluster:
    bindir = pg_bin()
    root = tempfile.mkdtemp(prefix="cpstore-pg-")
    os.makedirs(os.path.join(root, "sock"))
    if os.geteuid() == 0:
        shutil.chown(root, "postgres", "postgres")
        shutil.chown(os.path.join(root, "sock"), "postgres", "postgres")
    os.chmod(root, 0o755)
    made = Cluster(root, bindir)
    cmd = [
        os.path.join(bindir, "initdb"),
        "-D",
        made.data,
        "-U",
        "postgres",
        "--auth=trust",
        "-E",
        "UTF8",
        "--no-sync",
    ]
    subprocess.run(_as_server_user(cmd), check=True, capture_output=True, timeout=120)
    made.start()
    return made


def _destroy_in(pid: int, made: Cluster) -> None:
    """At exit: destroy the cluster in the process that made it (not in a forked child)."""
    if os.getpid() == pid:
        made.destroy()


_LOCK = threading.Lock()
_CLUSTER: dict[int, Cluster] = {}


def cluster() -> Cluster:
    """This process's cluster, started on first use and destroyed at exit."""
    with _LOCK:
        made = _CLUSTER.get(os.getpid())
        if made is None:
            made = _make()
            _CLUSTER[os.getpid()] = made
            atexit.register(_destroy_in, os.getpid(), made)
        return made


def fresh_url(**params: str) -> str:
    """A URL naming a new, empty schema of this process's cluster."""
    return cluster().url(f"t_{uuid.uuid4().hex[:16]}", **params)


@pytest.fixture(scope="session")
def pg_cluster() -> Cluster:
    """This test process's PostgreSQL cluster (started once, destroyed at exit).

    Test modules import this fixture and :func:`pg_url` from here (a conftest
    would clash with benchmarks/conftest.py under mypy).
    """
    return cluster()


@pytest.fixture
def pg_url(pg_cluster: Cluster) -> str:
    """A URL naming a new, empty store (its own schema) on the test cluster."""
    return fresh_url()


@pytest.fixture(params=["lmdb", "postgresql"], name="url")
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Fixture ``url``: a new store's location on each backend (a folder, or a new schema
    of the test cluster). Import it as ``from pg_cluster import backend_url``."""
    if request.param == "lmdb":
        return str(tmp_path / "s")
    return fresh_url()


@pytest.fixture(params=["lmdb", "postgresql"], name="store")
def backend_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    """Fixture ``store``: a fresh open store on each backend, closed after the test."""
    url = str(tmp_path / "s") if request.param == "lmdb" else fresh_url()
    opened = cpstore_store.open(url)
    yield opened
    opened.close()
