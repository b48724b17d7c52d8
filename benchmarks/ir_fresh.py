"""Instructions of an open + one whole-state get in a fresh process (cpstore vs its
``raw+checks`` side vs LMDBSaver), counted by valgrind: a figure a shared, loaded machine
does not move.

The child is bench_store.py's ``test_get_fresh_process`` child: the same imports, store
and checkpoint (the middle one of ``STEPS`` steps of bench_store's workload, recorded by
``CpstoreSide(..., "sync")`` and LMDBSaver), the same ``gc.collect()`` before the clock.
Only the timed part is counted: it runs inside ``contextvars.Context.run`` and
callgrind collects only inside that C function (``--toggle-collect=context_run``), so the
interpreter's start, the imports and the exit are not in the figure at all (subtracting
an idle child's count instead leaves a few 100 k of allocator noise). ``PYTHONHASHSEED=0``;
two runs agree within ~0.1 %. Needs ``valgrind`` and the bench extra; ~20 s a figure.

``--in MODULE:ATTR`` (e.g. ``cpstore.store.lmdb_open:close_on_exec`` or
``cpstore.store.lmdb_env:Env._open_dbs``; an attribute of the module the caller looks
it up in) counts instead only what runs inside that function during cpstore's open + get
(every call of it, summed): where the figure goes, step by step.

Run: ``.venv/bin/python benchmarks/ir_fresh.py [cpstore,raw+checks,LMDBSaver] [STEPS]``
(default those three sides, 300 steps), or
``.venv/bin/python benchmarks/ir_fresh.py --in MODULE:ATTR [--in ...] [STEPS]``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_store as bs  # noqa: E402

SIDES = ("cpstore", "raw+checks", "LMDBSaver")

#: Wraps one function so that each call runs inside ``Context.run`` (--in).
_WRAP = """
import contextvars, importlib
def _wrap(spec):
    mod, attr = spec.split(":")
    owner = importlib.import_module(mod)
    *path, last = attr.split(".")
    for part in path:
        owner = getattr(owner, part)
    orig = getattr(owner, last)
    def inside(*a, **k):
        return contextvars.copy_context().run(orig, *a, **k)
    setattr(owner, last, inside)
"""


def child_code(spec: str | None) -> str:
    """bench_store's fresh child, its timed part counted whole (``spec`` None) or only
    inside the function ``spec`` names."""
    head, rest = bs._FRESH_CHILD.split("t0 = time.perf_counter()\n")
    timed, tail = rest.split("t1 = time.perf_counter()\n")
    if spec is None:
        run = (
            "import contextvars\n"
            f"_timed = compile({timed!r}, 'timed', 'exec')\n"
            "t0 = time.perf_counter()\n"
            "contextvars.copy_context().run(exec, _timed, globals())\n"
        )
    else:
        run = f"{_WRAP}_wrap({spec!r})\nt0 = time.perf_counter()\n{timed}"
    return f"{head}{run}t1 = time.perf_counter()\n{tail}"


def build(root: Path, steps: int) -> dict[str, tuple[str, str]]:
    """Record the workload in cpstore and LMDBSaver; kind -> (path, middle checkpoint id)."""
    wl = bs.make_workload(steps)
    ours = bs.CpstoreSide(root / "cp", "sync")
    ours_ids = ours.record(wl)
    ours.close()
    peer = bs.lmdb_saver(root / "lm", sync=True)
    peer_ids = peer.record(wl)
    peer.close()
    mid = steps // 2
    cp = (str(root / "cp"), ours_ids[mid])
    return {"cpstore": cp, "raw+checks": cp, "LMDBSaver": (str(root / "lm"), peer_ids[mid])}


def count(kind: str, path: str, cid: str, spec: str | None = None) -> int:
    """callgrind's instruction count of one fresh child's timed part (or of ``spec``)."""
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--collect-atstart=no",
         "--toggle-collect=context_run", "--callgrind-out-file=/dev/null",
         sys.executable, "-c", child_code(spec), kind, path, cid],
        capture_output=True, text=True, check=True, env={**os.environ, "PYTHONHASHSEED": "0"},
    )  # fmt: skip
    found = re.search(r"Collected\s*:\s*(\d+)", out.stderr)
    if found is None:
        raise RuntimeError(f"no instruction count in valgrind's output: {out.stderr[-500:]}")
    return int(found.group(1))


def main(argv: list[str]) -> None:
    specs = [argv[i + 1] for i, a in enumerate(argv) if a == "--in"]
    rest = [a for i, a in enumerate(argv) if a != "--in" and (i == 0 or argv[i - 1] != "--in")]
    sides: list[str] = []
    if not specs:
        sides = rest.pop(0).split(",") if rest and not rest[0].isdigit() else list(SIDES)
    steps = int(rest[0]) if rest else 300
    with tempfile.TemporaryDirectory() as tmp:
        targets = build(Path(tmp), steps)
        for spec in specs:
            print(f"{count('cpstore', *targets['cpstore'], spec):>12,}  inside {spec}", flush=True)
        figures = {who: count(who, *targets[who]) for who in sides}
    for who, n in figures.items():
        print(f"{who:>11}: {n:>12,} instructions (open + one get)")
    if "cpstore" in figures and "LMDBSaver" in figures:
        print(f"LMDBSaver / cpstore: {figures['LMDBSaver'] / figures['cpstore']:.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:])
