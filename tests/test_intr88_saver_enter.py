"""intr88: ``CpstoreSaver.from_conn_string`` under an interrupt (a signal handler's
exception: Ctrl-C, a watchdog's alarm).

It was a plain ``@contextmanager``: contextlib's ``__enter__`` returns ``next()``'s value,
and CPython runs a pending signal handler on that C call's return, so an interrupt landing
there raised before the ``with`` block began. No ``__exit__`` ran, and the suspended
generator, kept by the exception's traceback, kept the store it had opened: while the
caller kept the exception (a REPL's ``sys.last_value``, a runtime logging it) the store
stayed open in this process, its handle counted and its descriptors held, and a
compaction of it here was refused ("close the store in this process before compacting
it"). It is now a ``cpstore.native.kept.kept_contextmanager``.

The landing on ``next()``'s return is found as tests/test_review87_lock_enter.py finds it;
the generator's other landings with tests/test_begin_interrupted.py's sweep, the exception
kept each time (one at contextlib's ``__exit__``'s start keeps the store open until the
exception is freed: a known limit). ``AsyncCpstoreSaver.from_conn_string`` has no such
landing: contextlib's ``__aenter__`` gets the generator's value through ``await`` (no
check for a pending handler between the generator's ``yield`` and the ``async with``
block).
"""

from __future__ import annotations

import gc
import sys
from pathlib import Path

import pytest
from test_begin_interrupted import _interrupting, fds_in
from test_review87_lock_enter import _kept_interrupt

import cpstore
from cpstore.langgraph import CpstoreSaver
from cpstore.store import lmdb_registry
from cpstore.store.maintenance import compact_store

#: The frames the sweep lands in: the generator, contextlib's enter and exit.
_FRAMES = frozenset({"from_conn_string", "__enter__", "__exit__"})


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        cid = st.recorder("r").checkpoint(0, {"a": 1})
    return path, cid


def _left(path: Path) -> list[str]:
    """What an interrupted saver block left of the store in this process. Asked first
    whether it is open here, which closes an environment a close left open with no handle
    (as the next open does: lmdb_registry's ``_LEFT_OPEN``), so what remains is held."""
    left = ["open here"] if lmdb_registry.is_open_here(str(path)) else []
    return left + [f"descriptor {fd}" for fd in fds_in(path)]


def _reads(path: Path, cid: str) -> None:
    compact_store(path)  # refused while this process has the store open
    with cpstore.open(path) as st, st.read(cid) as cp:
        assert cp.state() == {"a": 1}
        assert st.verify().ok


def _enter(path: Path) -> None:
    with CpstoreSaver.from_conn_string(path) as saver:
        assert saver.store.path


def test_a_savers_enter_interrupted_on_nexts_return_leaves_the_store_closed(
    store: tuple[Path, str],
) -> None:
    path, cid = store
    kept = _kept_interrupt("from_conn_string", lambda: _enter(path))
    assert kept is not None  # it landed
    # Before: ['open here', 'descriptor ...'] while ``kept`` lived (__enter__@54).
    assert _left(path) == []
    _reads(path, cid)
    del kept
    gc.collect()


def test_a_saver_block_interrupted_anywhere_leaves_the_store_closed(
    store: tuple[Path, str],
) -> None:
    path, cid = store
    wrong: list[str] = []
    k = 0
    while True:
        k += 1
        trace, landed = _interrupting(k, _FRAMES)
        kept: BaseException | None = None
        gc.disable()  # collector off while traced: the exception alone keeps the frames
        sys.settrace(trace)
        try:
            _enter(path)
        except KeyboardInterrupt as exc:
            kept = exc  # kept, as a REPL or a runtime logging it would
        finally:
            sys.settrace(None)
            gc.enable()
        if not landed:
            break
        assert kept is not None, landed
        if landed[0] != "__exit__@0":
            wrong += [f"{landed[0]}: {what}" for what in _left(path)]
        # At contextlib's __exit__'s start (any Python __exit__'s: nothing of it ran) the
        # frame the exception keeps holds the block's manager, so the store stays open
        # while the exception lives (docs/reliability.md, intr88): closed once it is freed,
        # by the generator's finalizer.
        del kept
        gc.collect()
        wrong += [f"{landed[0]}, freed: {what}" for what in _left(path)]
    assert k > 3
    assert wrong == []
    _reads(path, cid)
