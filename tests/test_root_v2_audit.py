"""Adversarial checks of root v2 (store layout 4): upgrades, backends, transfer, verify=False."""

from __future__ import annotations

import multiprocessing
from pathlib import Path
from typing import Any

import lmdb
import msgpack
import psycopg
import pytest
from pg_cluster import Cluster, fresh_url, pg_cluster, pg_url  # noqa: F401 - fixtures
from stored import edit_raw
from test_chunk_tree_root_v2 import _get, _history, _pack_root_v1, _root, _upper_of

import cpstore
from cpstore.cli import main
from cpstore.errors import IntegrityError
from cpstore.native.canonical import encode_value
from cpstore.store import append_state, chunk_tree
from cpstore.store.chunk_tree import load_tree, read_upper
from cpstore.store.content import objects_of
from cpstore.store.facade import Store
from cpstore.store.model import PG_STORE_VERSION, STORE_VERSION
from cpstore.store.pg_open import parse_url


def _sql(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
    with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
        cur = conn.execute(statement, params)
        return cur.fetchall() if cur.description is not None else []


def _set_pg_version(url: str, version: int) -> None:
    fmt = {"layout": "cpstore", "version": version, "digest": "xxh3-128"}
    schema = parse_url(url).schema
    _sql(url, f'UPDATE "{schema}"."meta" SET v = %s WHERE k = %s', (encode_value(fmt), b"format"))


def _record(store: Store, run: str, steps: int) -> list[str]:
    rec = store.recorder(run)
    return [rec.checkpoint(i, {"h": _history(60 + i)}) for i in range(steps)]


def _set_lmdb_version(path: Path, version: int) -> None:
    env = lmdb.open(str(path), max_dbs=16)
    with env.begin(write=True) as txn:
        fmt = {"layout": "cpstore", "version": version, "digest": "xxh3-128"}
        txn.put(b"format", encode_value(fmt), db=env.open_db(b"meta", txn=txn))
    env.close()


def _layout_3_store(where: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """A store of root v1 trees (what layout-3 builds wrote), its format set back to 3."""
    with monkeypatch.context() as m:
        m.setattr(chunk_tree, "pack_root", _pack_root_v1)
        m.setattr(append_state, "pack_root", _pack_root_v1)
        with cpstore.open(where) as st:
            ids = _record(st, "old", 3)
    if where.startswith("postgresql:"):
        _set_pg_version(where, 3)
    else:
        _set_lmdb_version(Path(where), 3)
    return ids


def _opener(where: str, run: str, barrier: Any, out: Any) -> None:
    barrier.wait()
    with cpstore.open(where) as st:
        ids = _record(st, run, 3)
        st.prune(keep_last=2)
        out.put((run, st.backend.layout, ids))


def _race_upgrade(where: str, processes: int) -> list[tuple[str, int, list[str]]]:
    ctx = multiprocessing.get_context("spawn")
    barrier, out = ctx.Barrier(processes), ctx.Queue()
    procs = [
        ctx.Process(target=_opener, args=(where, f"p{i}", barrier, out)) for i in range(processes)
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return results


def _current(where: str) -> int:
    """The layout a writable open brings ``where`` to (PostgreSQL stays at 5: model.py)."""
    return PG_STORE_VERSION if where.startswith("postgresql:") else STORE_VERSION


def _check_raced(where: str, old: list[str], results: list[tuple[str, int, list[str]]]) -> None:
    with cpstore.open(where, readonly=True) as st:
        assert st.backend.layout == _current(where)
        report = st.verify()
        assert report.ok, report.problems
        for _run, layout, ids in results:
            assert layout == _current(where)
            for i, cid in enumerate(ids[-2:], start=1):
                with st.read(cid) as cp:
                    assert cp.state_part("h") == _history(60 + i)
        with st.read(old[-1]) as cp:
            assert cp.state_part("h") == _history(62)


class TestConcurrentUpgrade:
    def test_three_processes_upgrading_a_layout_3_lmdb_store_at_once_leave_it_whole(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Writable opens racing on a layout-3 store: one upgrade, every write and prune lands."""
        where = str(tmp_path / "s")
        old = _layout_3_store(where, monkeypatch)
        _check_raced(where, old, _race_upgrade(where, 3))

    def test_three_processes_upgrading_a_layout_3_postgres_store_at_once_leave_it_whole(
        self, pg_url: str, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The same race on PostgreSQL: layout 4, refs digest intact, every write lands."""
        old = _layout_3_store(pg_url, monkeypatch)
        _check_raced(pg_url, old, _race_upgrade(pg_url, 3))


class TestPostgresUpgrade:
    def test_upgrading_a_layout_3_postgres_store_keeps_its_refs_digest(self, pg_url: str) -> None:
        """A layout-3 PostgreSQL store opened writable upgrades to 4 and still verifies ok."""
        with cpstore.open(pg_url) as st:
            _record(st, "a", 3)
            _record(st, "b", 2)
            assert st.verify().ok
        _set_pg_version(pg_url, 3)
        with cpstore.open(pg_url) as st:
            assert st.backend.layout == PG_STORE_VERSION
            report = st.verify()
            assert report.ok, report.problems
            st.recorder("a", parent=None).checkpoint(9, {"h": _history(70)})
            assert st.verify().ok


def _format_version(where: str) -> int:
    with cpstore.open(where, readonly=True) as st:
        return int(st.backend.layout)


def _reads(where: str, expect: dict[str, int]) -> None:
    with cpstore.open(where, readonly=True) as st:
        report = st.verify()
        assert report.ok, report.problems
        for cid, n in expect.items():
            with st.read(cid) as cp:
                assert cp.state_part("h") == _history(n)


class TestTransferAcrossLayouts:
    @pytest.mark.parametrize("backend", ["lmdb", "postgres"])
    def test_push_and_pull_between_a_layout_3_and_a_layout_4_store_leave_both_readable(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, backend: str, pg_cluster: Cluster
    ) -> None:
        """Layout 3 -> 4 carries root v1 trees as they are; 4 -> 3 upgrades the destination
        before any root v2 lands; the source read read-only stays at layout 3."""
        three = fresh_url() if backend == "postgres" else str(tmp_path / "three")
        four = str(tmp_path / "four")
        old = _layout_3_store(three, monkeypatch)
        with cpstore.open(four) as st:
            new = _record(st, "new", 3)
        assert main(["push", "--store", three, four]) == 0  # layout-3 source, read-only
        assert _format_version(three) == 3
        _reads(four, {old[-1]: 62, new[-1]: 62})
        other = str(tmp_path / "other3")
        old2 = _layout_3_store(other, monkeypatch)
        assert main(["pull", "--store", other, four]) == 0  # layout-3 destination
        assert _format_version(other) == STORE_VERSION
        _reads(other, {old2[-1]: 62, new[-1]: 62})
        assert main(["push", "--store", four, three]) == 0  # layout-4 source into layout 3
        assert _format_version(three) == _current(three)
        _reads(three, {old[-1]: 62, new[-1]: 62})


def _objects_edit(path: Path, key: bytes, value: bytes) -> None:
    edit_raw(path, "objects", key, lambda _old: value)


class TestUnverifiedReadsOfAWrongUpperSpine:
    @pytest.mark.parametrize(
        "variant", ["empty", "swapped", "extra-level", "dropped-level", "other-tree", "extra-entry"]
    )
    def test_an_unverified_read_refuses_an_upper_spine_that_does_not_fit_the_root(
        self, tmp_path: Path, variant: str
    ) -> None:
        """verify=False: a replaced upper spine fails on a node's level or the root's size."""
        path = tmp_path / "s"
        with cpstore.open(path) as st:
            cid = st.recorder("r").checkpoint(1, {"h": _history(400)})
            other = st.recorder("q").checkpoint(1, {"h": _history(300)})
            root, upper = _root(st, cid), _upper_of(st, cid)
            levels = read_upper(_get(st, upper) or b"", "t")
            other_raw = _get(st, _upper_of(st, other)) or b""
        assert len(levels) >= 2
        joined = [b"".join(t) for t in levels]
        first = next(i for i, t in enumerate(joined) if t)
        bad = {
            "empty": [b""],
            "swapped": joined[::-1],
            "extra-level": [*joined, joined[-1]],
            "dropped-level": joined[:-1],
            "extra-entry": [t + t[:16] if i == first else t for i, t in enumerate(joined)],
        }
        raw = other_raw if variant == "other-tree" else msgpack.packb(bad[variant])
        _objects_edit(path, upper, raw)
        with (
            cpstore.open(path) as st,
            st.backend.read_txn() as txn,
            pytest.raises(IntegrityError, match=r"wrong level|does not match|spans more"),
        ):
            load_tree(txn, objects_of(st.backend.dbs), root, b"\0" * 16, verify=False, where="h")


def _sharer(where: str, run: str, n: int, barrier: Any, out: Any) -> None:
    barrier.wait()
    with cpstore.open(where) as st:
        rec = st.recorder(run)
        log = cpstore.AppendLog()
        log.extend(_history(150))
        ids = []
        for i in range(n):
            log.append(_history(151 + i)[-1])
            ids.append(rec.checkpoint(i, {"h": _history(150 + i), "log": log}))
            if run == "a" and i % 3 == 2:  # a third run of the same states, then swept
                st.recorder("c").checkpoint(i, {"h": _history(150 + i), "log": log})
                st.delete_run("c")
                st.prune(keep_last=1)
        out.put((run, ids))


class TestSharedUpperSpines:
    def test_two_runs_sharing_upper_spines_survive_each_others_sweeps(self, tmp_path: Path) -> None:
        """Two processes record the same growing history (so roots and upper spines are
        shared) while one records and deletes a third run of the same states and prunes:
        every head still reads and verify is clean."""
        where = str(tmp_path / "s")
        with cpstore.open(where):
            pass
        ctx = multiprocessing.get_context("spawn")
        barrier, out = ctx.Barrier(2), ctx.Queue()
        procs = [ctx.Process(target=_sharer, args=(where, run, 24, barrier, out)) for run in "ab"]
        for p in procs:
            p.start()
        results = dict(out.get(timeout=120) for _ in procs)
        for p in procs:
            p.join(timeout=60)
            assert p.exitcode == 0
        with cpstore.open(where, readonly=True) as st:
            report = st.verify()
            assert report.ok, report.problems
            for run in "ab":
                with st.read(results[run][-1]) as cp:
                    assert cp.state_part("h") == _history(173)
                    assert list(cp.state_part("log")) == _history(174)
            assert _upper_of(st, results["a"][-1]) == _upper_of(st, results["b"][-1])
        with cpstore.open(where) as st:
            st.delete_run("a")
            assert st.verify().ok
            with st.read(results["b"][-1]) as cp:
                assert cp.state_part("h") == _history(173)
