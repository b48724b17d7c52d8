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

import os
from pathlib import Path

from test_begin_interrupted import one_checkpoint, read_wrong, sweep_landings
from test_left86_descriptors_interrupted import _interrupted_in

import cpstore
from cpstore.store import lmdb_registry, lmdb_registry_state


def _sweep(path: Path, mode: dict[str, object]) -> list[str]:
    cid = one_checkpoint(path)
    before = set(os.listdir("/proc/self/fd"))
    held: list[cpstore.Store] = []

    def interrupt(k: int) -> list[str]:
        held[:] = [cpstore.open(path, **mode)]  # type: ignore[arg-type]  # kept through the checks
        return _interrupted_in(
            k,
            "",
            held[0].close,
            names=frozenset({"release_env", "_unregister"}),
            not_at_start=frozenset({"release_env"}),
        )

    def left_wrong() -> str | None:
        if lmdb_registry.is_open_here(str(path)):
            return "still open here, no handle"
        if set(os.listdir("/proc/self/fd")) != before:
            return f"{sorted(set(os.listdir('/proc/self/fd')) - before)} open"
        if (
            lmdb_registry_state._REGISTRY
            or lmdb_registry_state._BY_FILE
            or lmdb_registry_state._LEFT_OPEN
        ):
            return "left registered"
        return read_wrong(path, cid)

    return sweep_landings(interrupt, left_wrong, at_least=4)


def test_a_close_interrupted_in_its_release_leaves_nothing_open(tmp_path: Path) -> None:
    assert _sweep(tmp_path / "s", {"durability": "none"}) == []


def test_a_readonly_close_interrupted_in_its_release_leaves_nothing_open(tmp_path: Path) -> None:
    assert _sweep(tmp_path / "s", {"readonly": True}) == []
