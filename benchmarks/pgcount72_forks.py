"""What refs70's create check costs per fork on PostgreSQL: the kept count vs ``count(*)``.

Every ref create (a fork, a new run's first checkpoint, a LangGraph thread's first put)
counts the refs table first (refs70). pgcount72 reads that count from the ``counts``
table the server keeps by triggers (cpstore/store/pg_count.py); before, it was a
``count(*)``, linear in the refs. For each size N (refs in the store: one run's branches,
written in one txn and the digest recorded by ``repair_ref``, not timed) this times
``store.fork`` into new branches, the two count paths interleaved in the same store and
process: ``kept`` (the handle as opened) and ``count(*)`` (the refs handle swapped for one
without the kept count: the old path). Each repeat times ``--forks`` forks per path, the
order alternating; a path's figure is the median (min-max) over the repeats of the
repeat's median per-fork time. One throwaway cluster (tests/pg_cluster.py: Unix socket,
``synchronous_commit=on``); each fork is a durable commit. A last figure is the
triggers' cost where they fire for nothing: a checkpoint on an existing branch (its ref
moves), the triggers enabled and disabled, interleaved; and the kept count's read after
``--held`` creates while a snapshot older than them is held (its old versions stay).

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/pgcount72_forks.py`` (sizes 1,000,
10,000 and 50,000; under 30 s on two cores, as docs/store.md says).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any, cast

import psycopg

import cpstore
from cpstore.store.pg_open import parse_url
from cpstore.store.pg_table import PgTable
from cpstore.store.refs import SET, pack_ref

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from pg_cluster import cluster

PATHS = ("kept", "count(*)")


def _fill(st: cpstore.Store, n: int) -> str:
    """Run ``r`` with one checkpoint and ``n`` refs in all (branches at it); its id."""
    cid = st.recorder("r").checkpoint(0, {"a": 0})
    raw = bytes.fromhex(cid)
    refs = st.backend.db("refs")

    def put(txn: Any) -> None:
        for i in range(n - 1):
            key = f"r\0b{i}".encode()
            txn.put(key, pack_ref(key, raw, SET), db=refs)

    st.backend.write_txn(put)
    st.repair_ref("r", "main", cid, operator="bench", reason="record the filled table")
    return cid


def _median_fork(st: cpstore.Store, cid: str, tag: str, forks: int) -> float:
    times = []
    for k in range(forks):
        t0 = time.perf_counter()
        st.fork("r", f"{tag}{k}", cid)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def measure(sizes: list[int], repeats: int, forks: int) -> dict[int, dict[str, list[float]]]:
    """Per size and path, each repeat's median per-fork seconds."""
    out: dict[int, dict[str, list[float]]] = {}
    for n in sizes:
        url = cluster().url(f"b_{uuid.uuid4().hex[:12]}")
        with cpstore.open(url) as st:
            cid = _fill(st, n)
            dbs = cast(dict[str, Any], st.backend.dbs)
            schema = parse_url(url).schema
            handles = {
                "kept": dbs["refs"],
                "count(*)": PgTable.of(schema, "refs", counted=False),
            }
            assert handles["kept"].sql["count"] != handles["count(*)"].sql["count"]
            got: dict[str, list[float]] = {p: [] for p in PATHS}
            for rep in range(repeats):
                order = PATHS if rep % 2 == 0 else PATHS[::-1]
                for path in order:
                    dbs["refs"] = handles[path]
                    got[path].append(_median_fork(st, cid, f"f{rep}{path[0]}", forks))
            dbs["refs"] = handles["kept"]
            assert st.verify().ok
        out[n] = got
    return out


def measure_moves(repeats: int, moves: int) -> dict[str, list[float]]:
    """The triggers' cost on the hot path: a checkpoint on an existing branch (its ref
    moves: an upsert inserting nothing, which still runs the statement trigger), with the
    count triggers enabled and disabled, interleaved; each repeat's median seconds."""
    url = cluster().url(f"b_{uuid.uuid4().hex[:12]}")
    schema = parse_url(url).schema
    got: dict[str, list[float]] = {"triggers": [], "no triggers": []}
    with (
        cpstore.open(url) as st,
        psycopg.connect(parse_url(url).conninfo, autocommit=True) as admin,
    ):
        rec = st.recorder("r")
        step = 0
        rec.checkpoint(step, {"a": step})
        for rep in range(repeats):
            order = list(got) if rep % 2 == 0 else list(got)[::-1]
            for path in order:
                how = "ENABLE" if path == "triggers" else "DISABLE"
                admin.execute(f'ALTER TABLE "{schema}"."refs" {how} TRIGGER USER')
                times = []
                for _ in range(moves):
                    step += 1
                    t0 = time.perf_counter()
                    rec.checkpoint(step, {"a": step})
                    times.append(time.perf_counter() - t0)
                got[path].append(statistics.median(times))
        admin.execute(f'ALTER TABLE "{schema}"."refs" ENABLE TRIGGER USER')
        assert st.verify().ok
    return got


def measure_held_snapshot(creates: int) -> dict[str, float]:
    """The kept count's read while a snapshot older than ``creates`` single-row inserts is
    held (a long verify, pg_dump: the row's old versions stay), best of 20 reads, seconds;
    and a ``count(*)`` of the table then, for scale."""
    url = cluster().url(f"b_{uuid.uuid4().hex[:12]}")
    schema = parse_url(url).schema
    read = f"SELECT n FROM \"{schema}\".counts WHERE name = 'refs'"
    star = f'SELECT count(*) FROM "{schema}"."refs"'
    conninfo = parse_url(url).conninfo
    out: dict[str, float] = {}
    with (
        cpstore.open(url),
        psycopg.connect(conninfo) as hold,
        psycopg.connect(conninfo, autocommit=True) as conn,
    ):

        def best(sql: str) -> float:
            times = []
            for _ in range(20):
                t0 = time.perf_counter()
                conn.execute(sql).fetchall()
                times.append(time.perf_counter() - t0)
            return min(times)

        def create(tag: bytes) -> None:
            with conn.pipeline():  # one autocommitted insert (and count update) each
                for i in range(creates):
                    conn.execute(
                        f'INSERT INTO "{schema}"."refs" (k, v) VALUES (%s, %s)',
                        (tag + i.to_bytes(4, "big"), b"v"),
                    )

        create(b"free\0")
        out[f"kept, after {creates:,} creates, no snapshot held"] = best(read)
        hold.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        hold.execute(read).fetchall()  # the snapshot, held until the rollback
        create(b"held\0")
        out[f"kept, after {creates:,} more creates under a held snapshot"] = best(read)
        out[f"count(*) of {2 * creates:,} refs"] = best(star)
        hold.rollback()
        create(b"after\0")
        out[f"kept, snapshot released, after {creates:,} more creates"] = best(read)
    return out


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def _shown(times: list[float]) -> str:
    return f"{_ms(statistics.median(times))} ({_ms(min(times))}-{_ms(max(times))}) ms"


def _paired(a: list[float], b: list[float]) -> str:
    """a/b paired within each repeat: median (min-max)."""
    ratios = [x / y for x, y in zip(a, b, strict=True)]
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,50000")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--forks", type=int, default=40)
    parser.add_argument("--moves", type=int, default=100)
    parser.add_argument("--held", type=int, default=20000)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    result = measure(sizes, args.repeats, args.forks)
    print(f"per-fork time, median (min-max) of {args.repeats} interleaved repeats")
    print(f"(each the median of {args.forks} forks)")
    for n, got in result.items():
        kept, star = got["kept"], got["count(*)"]
        print(
            f"{n:>7,} refs: kept {_shown(kept)}; count(*) {_shown(star)}; "
            f"count(*)/kept {_paired(star, kept)}"
        )
    moved = measure_moves(args.repeats, args.moves)
    on, off = moved["triggers"], moved["no triggers"]
    print(
        f"checkpoint on an existing branch (median of {args.moves}): triggers {_shown(on)}; "
        f"no triggers {_shown(off)}; triggers/none {_paired(on, off)}"
    )
    for label, seconds in measure_held_snapshot(args.held).items():
        print(f"read of the count: {label}: {_ms(seconds)} ms (best of 20)")


if __name__ == "__main__":
    main()
