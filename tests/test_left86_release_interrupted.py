"""left86: a close interrupted (a signal handler's exception) in the registry's release of
its environment.

``release_env`` counted the last handle down under the registry lock, let the lock go,
and then (in a second block, after waiting for other threads' txns) forgot the
environment and closed it. An interrupt landing between (the first lock's release, the
pid check) left it registered and open with no handle and not noted as left open: the
store stayed "already open in this process" for good (compact and an open with another
mode or durability refused). One landing in ``_unregister`` left it forgotten but open:
its descriptors (data file, lock file, the holder mark) leaked, and a later open of the
store here would have had LMDB open its file a second time in this process. Now the
environment is noted as left open as its last handle is dropped, so the next open (or
``is_open_here``, or a compact) closes it, and its forgetting and close are done in a loop
that catches what lands in them.

The sweep of tests/test_begin_interrupted.py over ``release_env`` and ``_unregister``
during a store's close (their start left out: ``release_env``'s is its caller's, the
backend's close); after each landing ``is_open_here`` must say no (closing what was left
open), no descriptor may be left and nothing registered, and the store opens and reads.
"""

from __future__ import annotations

import gc
import os
from pathlib import Path

from test_left86_descriptors_interrupted import _interrupted_in

import cpstore
from cpstore.store import lmdb_registry


def _sweep(path: Path, mode: dict[str, object]) -> list[str]:
    with cpstore.open(path, durability="none") as st:
        cid = st.recorder("r").checkpoint(0, {"a": 1})
    gc.collect()
    before = set(os.listdir("/proc/self/fd"))
    wrong: list[str] = []
    k = 0
    while True:
        k += 1
        st = cpstore.open(path, **mode)  # type: ignore[arg-type]
        landed = _interrupted_in(
            k,
            "",
            st.close,
            names=frozenset({"release_env", "_unregister"}),
            not_at_start=frozenset({"release_env"}),
        )
        gc.collect()
        if not landed:
            break
        if lmdb_registry.is_open_here(str(path)):
            wrong.append(f"{landed[0]}: still open here, no handle")
            break
        if set(os.listdir("/proc/self/fd")) != before:
            wrong.append(f"{landed[0]}: {sorted(set(os.listdir('/proc/self/fd')) - before)} open")
            break
        if lmdb_registry._REGISTRY or lmdb_registry._BY_FILE or lmdb_registry._LEFT_OPEN:
            wrong.append(f"{landed[0]}: left registered")
            break
        with cpstore.open(path, durability="none") as again, again.read(cid) as cp:
            if cp.state() != {"a": 1}:
                wrong.append(f"{landed[0]}: read {cp.state()!r}")
        gc.collect()
    if k <= 4:
        wrong.append(f"only {k - 1} landings")
    return wrong


def test_a_close_interrupted_in_its_release_leaves_nothing_open(tmp_path: Path) -> None:
    assert _sweep(tmp_path / "s", {"durability": "none"}) == []


def test_a_readonly_close_interrupted_in_its_release_leaves_nothing_open(tmp_path: Path) -> None:
    assert _sweep(tmp_path / "s", {"readonly": True}) == []
