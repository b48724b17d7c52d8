"""What handing out kept zero-copy views costs a checkpoint reader (slices93).

A store with one checkpoint of 1,000 tokens. Timed with ``timeit``, best of 9 x 3,000,
each a whole ``with store.read(id)`` block: the open alone; ``token_value_views()``
(two views wrapped by ``binding.kept_view``, the read ended at the block's end);
the same with a slice kept to the function's return (the read handed over, ended at
the next read); ``token_value_views(leased=True)`` (the map's own views, not kept: what
the replay cursor and validate take).

Run: ``PYTHONPATH=. .venv/bin/python benchmarks/slices93_views.py``.
"""

from __future__ import annotations

import tempfile
import timeit
from collections.abc import Callable
from typing import Any

import cpstore


def _cases(st: Any, cid: str) -> dict[str, Callable[[], object]]:
    def open_only() -> None:
        with st.read(cid):
            pass

    def views() -> None:
        with st.read(cid) as cp:
            cp.token_value_views()

    def slice_kept() -> bytes:
        with st.read(cid) as cp:
            head = cp.token_value_views()[0][1:5]
        return bytes(head)

    def leased() -> None:
        with st.read(cid) as cp:
            cp.token_value_views(leased=True)

    return {"open": open_only, "views": views, "slice kept": slice_kept, "leased": leased}


def main() -> None:
    with tempfile.TemporaryDirectory() as d, cpstore.open(f"{d}/s") as st:
        rec = st.recorder("r")
        for i in range(1000):
            rec.token("rng", i)
        cid = str(rec.checkpoint(0, {"a": 1}))
        rec.close()
        best: dict[str, float] = {}
        for _ in range(9):
            for name, case in _cases(st, cid).items():
                took = timeit.timeit(case, number=3000) / 3000
                best[name] = min(best.get(name, took), took)
        for name, took in best.items():
            print(f"{name:12s} {took * 1e6:7.2f} us per block")


if __name__ == "__main__":
    main()
