"""review78's recording for the byte-for-byte comparison with 60c078b (run as a script with
the tree to import cpstore from first on the path): a seeded random scenario (states of
every value kind, chunked parts, steps at msgpack's width edges, non-ASCII and "%" names,
observations, decisions, tokens, tags, metadata, a fork) under a fixed clock, then a
digest of every stored entry: each LMDB table, or each table of the PostgreSQL schema.

Usage: ``python review78_record.py TREE LOCATION SEED``; prints ``COUNT SHA256``.
"""

from __future__ import annotations

import hashlib
import random
import sys
from typing import Any


def _scenario(cpstore: Any, location: str, seed: int) -> None:
    from cpstore.store import backend_base  # noqa: PLC0415 - the tree's own

    clock = [1.7e9]

    def now(self: Any) -> float:
        clock[0] += 0.25
        return clock[0]

    backend_base.BackendBase.now = now  # type: ignore[method-assign]
    rng = random.Random(seed)
    edges = [0, 1, 127, 128, 255, 256, 4095, 4096, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1]
    names = ["r", "r\u00fcn", "\u30e9\u30f3", "\U0001f600x", "a b%", "\u00e9" * 40]

    def value(depth: int = 0) -> Any:
        k = rng.randrange(8 if depth < 2 else 5)
        if k == 0:
            return rng.randrange(-(2**63), 2**63)
        if k == 1:
            return "".join(
                rng.choice("a\u00e9\u20ac\U0001f600%\0b") for _ in range(rng.randrange(12))
            )
        if k == 2:
            return rng.randbytes(rng.choice([0, 5, 100, 3000]))
        if k == 3:
            return rng.random()
        if k == 4:
            return rng.choice([None, True, False])
        if k == 5:
            return [value(depth + 1) for _ in range(rng.randrange(4))]
        if k == 6:
            return {f"k{i}%": value(depth + 1) for i in range(rng.randrange(4))}
        return rng.randbytes(rng.choice([70_000, 300_000]))  # chunked

    with cpstore.open(location, durability="none") as st:
        for n, run in enumerate(names[: 3 + seed % 4]):
            rec = st.recorder(run, branch=rng.choice(["main", "br\u00e4nch", "b%s"]))
            steps = sorted(rng.sample(edges, 5)) if n % 2 else list(range(rng.randrange(3, 8)))
            cid = ""
            for step in steps:
                if rng.random() < 0.3:
                    rec.observe(step, "src", rng.randbytes(20), pinned_at=None)
                if rng.random() < 0.3:
                    rec.decision(step, "node", tool=rng.choice(["a", "\u00fc"]))
                if rng.random() < 0.3:
                    rec.token("text", f"t\u00f6k{step}")
                state: Any = (
                    {f"p{i}": value() for i in range(rng.randrange(1, 5))}
                    if rng.random() < 0.9
                    else rng.randbytes(50)
                )
                cid = rec.checkpoint(
                    step,
                    state,
                    tags=rng.choice([(), ("t1",), ("\u00fc", "t%")]),
                    metadata=rng.choice([None, {"m": 1, "\u00fc": "x"}]),
                )
            if n == 1:
                st.recorder(run, branch="fork", parent=cid).checkpoint(steps[-1], {"f": 1})


def _dump_lmdb(path: str) -> tuple[int, str]:
    import lmdb  # noqa: PLC0415

    env = lmdb.open(path, subdir=True, readonly=True, lock=False, max_dbs=64)
    h, count = hashlib.sha256(), 0
    with env.begin() as txn:
        for name in [k for k, _ in txn.cursor()]:
            h.update(b"T" + name)
            db = env.open_db(name, txn=txn, create=False)
            for k, v in txn.cursor(db=db):
                h.update(len(k).to_bytes(4, "big") + k + len(v).to_bytes(4, "big") + v)
                count += 1
    env.close()
    return count, h.hexdigest()


def _dump_pg(url: str) -> tuple[int, str]:
    import psycopg  # noqa: PLC0415

    from cpstore.store.pg_open import parse_url  # noqa: PLC0415

    parsed = parse_url(url)
    h, count = hashlib.sha256(), 0
    with psycopg.connect(parsed.conninfo) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = %s "
                "ORDER BY table_name",
                (parsed.schema,),
            )
        ]
        for table in tables:
            h.update(b"T" + table.encode())
            for row in conn.execute(f'SELECT * FROM "{parsed.schema}"."{table}" ORDER BY 1'):
                if row[0] == b"store_id":  # a new store's random id (LMDB's is not a row)
                    continue
                h.update(
                    repr(tuple(bytes(c) if isinstance(c, memoryview) else c for c in row)).encode()
                )
                count += 1
    return count, h.hexdigest()


def main() -> None:
    tree, location, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    sys.path.insert(0, tree)
    import cpstore  # noqa: PLC0415

    if not cpstore.__file__ or not cpstore.__file__.startswith(tree):
        raise SystemExit(f"cpstore imported from {cpstore.__file__}, not {tree}")
    _scenario(cpstore, location, seed)
    pg = location.startswith("postgresql:")
    count, digest = _dump_pg(location) if pg else _dump_lmdb(location)
    print(count, digest)


if __name__ == "__main__":
    main()
