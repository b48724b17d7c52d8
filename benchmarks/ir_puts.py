"""Instructions per ``durability="none"`` put (cpstore vs its raw limit vs LMDBSaver
``sync=False``), counted by valgrind: a figure a shared, loaded machine does not move.

Same workload and sides as bench_store.py's put tests (10 channels x 1 KB, one changing
per step): ``CpstoreSide(..., "none")``, the ``RawLayout5`` raw limit (cpstore's layout
and checks in bare LMDB) and LangGraph's LMDBSaver with ``sync=False``; ``saver`` is
cpstore's own LangGraph saver on a ``durability="none"`` store, called as LangGraph
calls a saver's ``put`` (bench_store's ``SaverSide``; not in the default sides). Each figure is
(instructions recording ``HIGH`` steps - recording ``LOW`` steps) / (HIGH - LOW): the
process start, imports, opening and the workload's generation (made for ``HIGH`` steps
on both runs) cancel out. ``PYTHONHASHSEED=0``. Needs ``valgrind`` and the bench extra.

Run: ``.venv/bin/python benchmarks/ir_puts.py [cpstore,raw,lmdbsaver,saver] [LOW HIGH]``
(default the first three sides, 100 and 600 steps).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SIDES = ("cpstore", "raw", "lmdbsaver")
#: Sides counted only when named.
EXTRA_SIDES = ("saver",)


def _side(root: Path, who: str) -> Any:
    sys.path.insert(0, str(HERE))
    import bench_store as bs  # noqa: PLC0415

    if who == "cpstore":
        return bs.CpstoreSide(root / "cp", "none")
    if who == "raw":
        return bs.RawLayout5(root / "raw")
    if who == "saver":
        import bench_langgraph as bl  # noqa: PLC0415

        return bl.SAVERS["cpstore none"](root / "sv")
    return bs.lmdb_saver(root / "lm", sync=False)


def _child(root: str, who: str, steps: int, high: int) -> None:
    sys.path.insert(0, str(HERE))
    import bench_store as bs  # noqa: PLC0415

    full = bs.make_workload(high)  # generated alike in both runs: it cancels out
    side = _side(Path(root), who)
    side.record(bs.Workload(full.states[:steps], full.changed[:steps]))
    side.close()


def _count(who: str, steps: int, high: int) -> int:
    sys.path.insert(0, str(HERE))
    from valgrind_ir import instructions  # noqa: PLC0415

    with tempfile.TemporaryDirectory() as root:
        return instructions(__file__, root, who, str(steps), str(high))


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        _child(argv[1], argv[2], int(argv[3]), int(argv[4]))
        return
    sides = argv[0].split(",") if argv else list(SIDES)
    low, high = (int(argv[1]), int(argv[2])) if len(argv) >= 3 else (100, 600)
    for who in sides:
        if who not in SIDES + EXTRA_SIDES:
            known = ", ".join(SIDES + EXTRA_SIDES)
            raise SystemExit(f"unknown side {who!r}; expected some of {known}")
        per_put = (_count(who, high, high) - _count(who, low, high)) / (high - low)
        print(f"{who}: {per_put:,.0f} instructions per put ({low} -> {high} steps)", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
