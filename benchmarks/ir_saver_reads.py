"""Instructions per LangGraph read (cpstore vs LMDBSaver), counted by valgrind: a figure
a shared, loaded machine does not move (wall and CPU clocks there drift by 2x).

Same workload and calls as bench_langgraph.py's ``test_get_tuple`` / ``test_list_100``
(channels: 10 x 1 KB, one changing per step; 200 ``get_tuple`` by id; ``list(limit=100)``).
Each figure is (instructions of 6 passes - of 1 pass) / (5 x items): the process start,
imports and the opening of the stores cancel out. Needs ``valgrind`` (apt-get install
valgrind) and the bench extra. Takes ~2 min a figure under valgrind.

Run: ``.venv/bin/python benchmarks/ir_saver_reads.py [steps]`` (default 300).
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_langgraph as bl  # noqa: E402
import bench_store  # noqa: E402
from valgrind_ir import instructions  # noqa: E402


def _side(root: Path, who: str) -> Any:
    if who == "cp":
        return bl.SAVERS["cpstore durable"](root / who)
    # bench_store's 2 GiB map: valgrind refuses bench_langgraph's 64 GiB one
    return bench_store.lmdb_saver(root / who, sync=True)


def build(root: Path, steps: int) -> None:
    """Record the workload once per saver; the ids go to ``ids.json``."""
    wl = bench_store.make_workload(steps)
    ids = {}
    for who in ("cp", "lm"):
        side = _side(root, who)
        ids[who] = side.record(wl)
        side.close()
    (root / "ids.json").write_text(json.dumps(ids))


def run(root: Path, who: str, mode: str, passes: int) -> None:
    """One warm pass, then ``passes`` more (the child valgrind counts)."""
    ids = json.loads((root / "ids.json").read_text())[who]
    side = _side(root, who)
    saver = side.saver
    cfgs = [bl._config(c) for c in ids[:: max(1, len(ids) // bl.GETS)][: bl.GETS]]

    def once() -> None:
        if mode == "get":
            for cfg in cfgs:
                if len(saver.get_tuple(cfg).checkpoint["channel_values"]) != bench_store.PARTS:
                    raise AssertionError(who)
        elif len(list(saver.list(bl._config(), limit=bl.LIST))) != bl.LIST:
            raise AssertionError(who)

    for _ in range(passes + 1):
        once()
    side.close()


def _count(root: Path, who: str, mode: str, passes: int) -> int:
    return instructions(__file__, str(root), who, mode, str(passes))


def main(argv: list[str]) -> None:
    if argv[:1] == ["--child"]:
        run(Path(argv[1]), argv[2], argv[3], int(argv[4]))
        return
    steps = int(argv[0]) if argv else 300
    with tempfile.TemporaryDirectory(prefix="ir-saver-") as tmp:
        root = Path(tmp)
        build(root, steps)
        for mode, items in (("get", bl.GETS), ("list", bl.LIST)):
            per = {}
            for who in ("cp", "lm"):
                one, six = (_count(root, who, mode, k) for k in (1, 6))
                per[who] = (six - one) / (5 * min(items, steps))
            print(
                f"{mode}: cpstore {per['cp']:,.0f}  LMDBSaver {per['lm']:,.0f} instructions/item"
                f"  ratio {per['lm'] / per['cp']:.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1:])
