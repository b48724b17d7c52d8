"""refkey100: what the check of the ref rows beside a key costs a create and a miss.

Usage: ``python benchmarks/refkey100_creates.py [lmdb|URL] [N]`` (N creates, default
10,000). On one store, in interleaved blocks of 500, with the check and without it (the
check replaced by a no-op where ``refs`` and ``entries`` call it): a new run's first
checkpoint (a recorder's start reads the absent head, then its commit creates the ref:
one miss and one create), and ``Store.ref`` of an absent run (one miss). Prints the
median µs per call of each, and their difference. Durability ``none`` on LMDB (no fsync
in the figure).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import cpstore
from cpstore.store import entries, refs

BLOCK = 500


@contextmanager
def _without() -> Iterator[None]:
    """The check replaced by a no-op at both of its call sites."""
    name = "refuse_damaged_neighbours"
    saved = [(m, getattr(m, name)) for m in (refs, entries)]

    def skip(*_: object, **__: object) -> None:
        return None

    for module, _ in saved:
        setattr(module, name, skip)
    try:
        yield
    finally:
        for module, check in saved:
            setattr(module, name, check)


def _block(call: Callable[[int], object], start: int) -> float:
    t0 = time.perf_counter()
    for i in range(start, start + BLOCK):
        call(i)
    return (time.perf_counter() - t0) / BLOCK * 1e6


def main() -> None:
    where = sys.argv[1] if len(sys.argv) > 1 else "lmdb"
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    with tempfile.TemporaryDirectory() as tmp:
        url = f"{tmp}/s" if where == "lmdb" else where
        kwargs = {"durability": "none"} if where == "lmdb" else {}
        with cpstore.open(url, **kwargs) as st:  # type: ignore[arg-type]

            def create(i: int) -> object:
                return st.recorder(f"run-{i:07d}").checkpoint(0, {"i": i})

            def miss(i: int) -> object:
                return st.ref(f"run-{i:07d}x")

            out: dict[str, dict[bool, list[float]]] = {"create": {}, "miss": {}}
            for name, call in (("create", create), ("miss", miss)):
                got: dict[bool, list[float]] = {True: [], False: []}
                for k in range(0, n, 2 * BLOCK):
                    for on in (True, False) if (k // (2 * BLOCK)) % 2 == 0 else (False, True):
                        start = k + (0 if on else BLOCK)
                        if on:
                            got[on].append(_block(call, start))
                        else:
                            with _without():
                                got[on].append(_block(call, start))
                out[name] = got
            for name, got in out.items():
                with_, without = statistics.median(got[True]), statistics.median(got[False])
                print(
                    f"{where.split('?')[0][:40]} {name}: with the check {with_:.1f} µs, "
                    f"without {without:.1f} µs, difference {with_ - without:+.1f} µs "
                    f"({len(got[True])} blocks of {BLOCK} each)"
                )


if __name__ == "__main__":
    main()
