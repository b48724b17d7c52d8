"""Instructions per Store get (``read(id).state()``, every object hash-checked), counted by
valgrind: a figure a shared, loaded machine does not move.

Same workload and call as bench_store.py's ``test_get_by_id`` (10 channels x 1 KB, one
changing per step; ``with store.read(id) as cp: cp.state()``) on a ``durability="none"``
store of ``STEPS`` steps, 100 ids spread over it. Each figure is (instructions of 6 passes
- of 1 pass) / (5 x 100 reads): the process start, imports, the recording and the opening
cancel out. ``PYTHONHASHSEED=0`` (unseeded, dict and set layouts move a figure by up to
~4 k; seeded, two runs of one tree differ by ~0.3 k). Needs ``valgrind`` and the bench extra.

Run: ``.venv/bin/python benchmarks/ir_gets.py [STEPS]`` (default 300).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
READS = 100


def _child(root: str, steps: int, passes: int) -> None:
    sys.path.insert(0, str(HERE))
    import bench_store as bs  # noqa: PLC0415

    side = bs.CpstoreSide(Path(root) / "cp", "none")
    ids = side.record(bs.make_workload(steps))
    store = side.store
    picks = ids[:: max(1, steps // READS)][:READS]
    for _ in range(passes):
        for cid in picks:
            with store.read(cid) as cp:
                cp.state()
    side.close()


def _count(steps: int, passes: int) -> int:
    sys.path.insert(0, str(HERE))
    from valgrind_ir import instructions  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as root:
        return instructions(__file__, root, str(steps), str(passes))


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        _child(argv[1], int(argv[2]), int(argv[3]))
        return
    steps = int(argv[0]) if argv else 300
    if steps < READS:
        raise SystemExit(f"at least {READS} steps")
    per_get = (_count(steps, 6) - _count(steps, 1)) / (5 * READS)
    print(f"cpstore get: {per_get:,.0f} instructions per read(id).state() ({steps} steps)")


if __name__ == "__main__":
    main(sys.argv[1:])
