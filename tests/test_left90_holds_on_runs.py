"""left90: ``retained.holds_on_runs``, the holds on some runs without decoding every row.

``release_left_holds`` (a keep_latest prune, each delete_thread) decoded every retained
row of the store (``Store.retained()``) to find the holds on one thread's runs: ~256 ms
per call beside 10 000 holds of other runs. ``holds_on_runs`` decodes a row only when its
bytes hold one of the runs' names (a canonical str is its UTF-8 bytes). It must name
exactly the holds the whole decode names, in the same order: run names inside other
names, in branch names and audit strings, non-ASCII names, one and several holds per row,
malformed rows, a lone surrogate asked for (no stored name holds one)."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pg_cluster import backend_store, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.store.retained import RETAINED_PREFIX, add_hold, holds_on_runs

_NAMES = st.sampled_from(["lg:t", "lg:t2", "t", "lg:", "é", "e\u0301", "lg:té", "ü:lg:t", "b"])


def _reference(store: cpstore.Store, runs: set[str]) -> list[tuple[str, dict[str, str]]]:
    """The holds the whole decode names (release_left_holds' loop before left90)."""
    return [
        (head, hold)
        for head, row in store.retained().items()
        for hold in row["holds"]
        if hold.get("run") in runs
    ]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    rows=st.lists(
        st.lists(st.tuples(_NAMES, _NAMES), min_size=1, max_size=3), min_size=0, max_size=8
    ),
    asked=st.sets(st.one_of(_NAMES, st.just("a\udc80")), max_size=3),
    malformed=st.booleans(),
)
def test_the_same_holds_as_the_whole_decode(
    tmp_path_factory: object,
    rows: list[list[tuple[str, str]]],
    asked: set[str],
    malformed: bool,
) -> None:
    path = Path(tmp_path_factory.mktemp("s")) / "s"  # type: ignore[attr-defined]
    with cpstore.open(path, durability="none") as store:
        rec = store.recorder("r")
        cids = [bytes.fromhex(rec.checkpoint(i, {"i": i})) for i in range(len(rows) + 1)]
        meta = store.backend.db("meta")
        n = iter(range(1 << 20))

        def hold_all(txn: object) -> None:
            for cid, holds in zip(cids, rows, strict=False):
                for run, branch in holds:
                    audit = f"{next(n):08x}" + run.encode().hex()[:24].ljust(24, "0")
                    add_hold(txn, meta, cid, run=run, branch=branch, audit=audit)
            if malformed:  # the last checkpoint's row: unreadable, its bytes naming runs
                txn.put(RETAINED_PREFIX + cids[-1], b"\xa4lg:t\xa2lg:\xa1t", db=meta)  # type: ignore[attr-defined]

        store.backend.write_txn(hold_all)
        assert holds_on_runs(store.backend, asked) == _reference(store, asked)
        assert holds_on_runs(store.backend, iter(asked)) == _reference(store, asked)


_ROWS = [
    [("lg:t", "b")],
    [("lg:t2", "lg:t"), ("t", "é")],
    [("é", "e\u0301"), ("e\u0301", "lg:té"), ("ü:lg:t", "t")],
    [("b", "lg:")],
    [("lg:", "ü:lg:t"), ("lg:té", "lg:t2")],
]


def test_each_backend_names_the_holds_the_whole_decode_names(store: cpstore.Store) -> None:
    """Both backends' cursors (PostgreSQL's returns the bytea as stored): rows of one to
    three holds, a malformed row naming runs, each name and pair of names asked for."""
    rec = store.recorder("r")
    cids = [bytes.fromhex(rec.checkpoint(i, {"i": i})) for i in range(len(_ROWS) + 1)]
    meta = store.backend.db("meta")

    def hold_all(txn: Any) -> None:
        for i, (cid, holds) in enumerate(zip(cids, _ROWS, strict=False)):
            for j, (run, branch) in enumerate(holds):
                add_hold(txn, meta, cid, run=run, branch=branch, audit=f"{i:016x}{j:016x}")
        txn.put(RETAINED_PREFIX + cids[-1], b"\xa4lg:t\xa2lg:\xa1t", db=meta)

    store.backend.write_txn(hold_all)
    names = sorted({name for holds in _ROWS for hold in holds for name in hold})
    asks = [{a} for a in names] + [set(p) for p in combinations(names, 2)]
    asks += [{"a\udc80", "lg:t"}, {"nobody"}, set()]
    for asked in asks:
        assert holds_on_runs(store.backend, asked) == _reference(store, asked)
    assert {h["run"] for _, h in holds_on_runs(store.backend, names)} == {
        run for holds in _ROWS for run, _ in holds
    }
