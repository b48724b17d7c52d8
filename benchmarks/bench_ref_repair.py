"""What the scan a ``repair_ref`` of a damaged refs table makes costs (orphan68).

A repair of a table that fails its digest reads every checkpoint record once to find
what the repaired table no longer reaches (cpstore/store/ref_repair.py,
``forgotten_heads``). This times it on a store of 100 runs x 100 checkpoints
(``quick``: 10 x 100), rounds alternating: one run's ref deleted (100 checkpoints
unreachable, the vanished ref named by the digest) and a digest bit flipped (nothing
unreachable: the walk alone).

Run: ``.venv/bin/python -m pytest benchmarks/bench_ref_repair.py --benchmark-only -s``.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from pytest_benchmark.fixture import BenchmarkFixture

import cpstore
from cpstore.store.refs import REFS_DIGEST_KEY


def test_repair_after_a_vanished_ref(benchmark: BenchmarkFixture, size: str) -> None:
    runs = 100 if size == "full" else 10
    tmp = Path(tempfile.mkdtemp(prefix="cpstore-bench-repair-"))
    with cpstore.open(tmp / "s", durability="none") as st:
        for r in range(runs):
            with st.recorder(f"r{r}") as rec:
                for i in range(100):
                    rec.checkpoint(i, {"i": i, "r": r})
        other = st.ref("r0")
        assert other is not None
        meta, refs = st.backend.db("meta"), st.backend.db("refs")
        times: dict[str, list[float]] = {"vanished ref": [], "flipped digest": []}
        rounds = [0]

        def damage(txn: Any) -> None:
            if rounds[0] % 2:  # behind cpstore's back: a digest bit flipped
                good = bytes(txn.get(REFS_DIGEST_KEY, db=meta))
                txn.put(REFS_DIGEST_KEY, bytes([good[0] ^ 1]) + good[1:], db=meta)
            else:  # a ref deleted
                txn.delete(f"r{runs - 1}\0main".encode(), db=refs)

        def once() -> None:
            st.backend.write_txn(damage)
            t0 = time.perf_counter()
            record = st.repair_ref("r0", "main", other, operator="b", reason="bench")
            times["flipped digest" if rounds[0] % 2 else "vanished ref"].append(
                time.perf_counter() - t0
            )
            for cid in record.body["kept"]:  # the repair accepted the short table:
                if not rounds[0] % 2:  # (a flipped digest keeps every tip: released)
                    st.fork(f"r{runs - 1}", "main", cid)  # a fork puts the ref back
                st.release_retained(cid, operator="b", reason="bench")
            rounds[0] += 1

        benchmark.pedantic(once, rounds=10, iterations=1)
        for label, got in times.items():
            print(f"\nrepair_ref, {runs * 100} checkpoints, {label}: {min(got) * 1e3:.1f} ms")
