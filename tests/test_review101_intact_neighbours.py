"""review101: refkey100's neighbour check refuses nothing on an intact store, on either engine.

Names that sort next to one another in every way the check's walk and PostgreSQL's one
query (``PgTxn.near``) bound by: run ids that are prefixes of one another (``a``,
``a\\x01b``, ``ab``), ids and branches with bytes at and past 0x80 and 0xff-sorting
characters, runs of exactly RUN_ROWS and RUN_ROWS + 1 refs and of many, the table's first
and last rows, an empty table; each created from nothing and read absent beside the
others, and deleted (``reset_ref`` to None) then made again. A refusal here would be the
check taking an intact row for a damaged one (a byte order or a bound off by one).
"""

from __future__ import annotations

import random

from pg_cluster import backend_url  # noqa: F401 - fixture

import cpstore
from cpstore.store.ref_neighbours import RUN_ROWS

RUNS = ["a", "a\x01", "a\x01b", "ab", "a\x7f", "a\x80", "aé", "a\uffff", "\U0010ffff", "b"]
BRANCHES = ["main", "m", "ma", "main\x01", "mainé", "\u00ff", "\U0001f600", "z" * 40]


def test_creates_and_misses_beside_intact_rows_are_never_refused(url: str) -> None:
    rng = random.Random(101)
    with cpstore.open(url) as st:
        assert st.ref("a") is None  # an empty table
        head = st.recorder("a").checkpoint(0, {"a": 0})
        runs = {"a": head}
        for run in RUNS[1:]:
            assert st.ref(run) is None
            runs[run] = st.recorder(run).checkpoint(0, {"r": run})
        made: list[tuple[str, str]] = []
        for run in RUNS:
            count = rng.choice([RUN_ROWS - 1, RUN_ROWS, RUN_ROWS + 1, 3 * RUN_ROWS])
            names = list(BRANCHES) + [f"b{i:02d}" for i in range(count)]
            rng.shuffle(names)
            for name in names[: count + 1]:
                if name == "main":
                    continue
                assert st.ref(run, name) is None
                assert st.ref(run, name + "~") is None  # a key just past it
                st.fork(run, name, runs[run])
                made.append((run, name))
        for run, name in rng.sample(made, 12):
            st.reset_ref(run, name, None, expected_old=runs[run], operator="t", reason="t")
            assert st.ref(run, name) is None
            st.set_ref(run, name, runs[run], expected_old=None)
        for run in RUNS:
            assert st.ref(run) == runs[run]
            st.recorder(run).checkpoint(1, {"again": run})
        assert st.verify().ok
