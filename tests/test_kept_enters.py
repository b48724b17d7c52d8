"""review87's note, outside the LMDB open layer: the other ``@contextmanager`` blocks that
hold something while they yield, entered with an interrupt (a signal handler's exception)
landing on contextlib's ``next()`` return in ``__enter__``.

Such a landing raised before the ``with`` block began, so no ``__exit__`` ran, and the
suspended generator, kept by the exception's traceback, held on while the caller kept
the exception (a REPL's ``sys.last_value``, a runtime logging it):

- ``log_view`` (a recorder's append-only log, read whole for a commit) held the log's lock
  and views of its buffer: the next append of the log waited forever;
- ``audit_view`` held its read txn: on LMDB the store's close gave up, "left open" (a
  PostgreSQL read txn takes its connection at its first statement: nothing held);
- ``recursion_headroom`` (a run document's load) kept the interpreter's recursion limit
  raised and its user counted.

Each is now a ``cpstore.native.kept.kept_contextmanager``: no landing between the ``yield`` and
the ``with`` block. The landing is found as tests/test_review87_lock_enter.py finds it."""

from __future__ import annotations

import gc
import sys
import threading
from typing import Any

from pg_cluster import backend_url  # noqa: F401 - fixture
from test_review87_lock_enter import _kept_interrupt

import cpstore
from cpstore.native.append_log import AppendLog, log_view
from cpstore.run import locate
from cpstore.store import lmdb_registry


def _in_thread(call: Any, seconds: float = 20) -> list[BaseException | None]:
    """Run ``call`` in another thread; [its error or None] when it ended in time, []."""
    out: list[BaseException | None] = []

    def run() -> None:
        try:
            call()
            out.append(None)
        except BaseException as exc:
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return out


def test_a_log_views_enter_interrupted_leaves_the_log_appendable() -> None:
    log = AppendLog([1, 2])

    def view() -> None:
        with log_view(log):
            pass

    kept = _kept_interrupt("log_view", view)
    assert kept is not None  # it landed
    assert _in_thread(lambda: log.append(3), 5) == [None]  # before: waited on the lock
    assert log.to_list() == [1, 2, 3]
    del kept


def test_an_audit_views_enter_interrupted_holds_no_read(url: str) -> None:
    st = cpstore.open(url)
    cid = st.recorder("r").checkpoint(0, {"a": 1})

    def view() -> None:
        with st.audit_view():
            pass

    kept = _kept_interrupt("audit_view", view)
    assert kept is not None
    assert _in_thread(st.close) == [None]  # before (LMDB): "left open" by this read
    if "://" not in url:
        assert not lmdb_registry.is_open_here(url)
    with cpstore.open(url) as again, again.read(cid) as cp:
        assert cp.state() == {"a": 1}
        assert again.verify().ok
    del kept
    gc.collect()


def test_a_recursion_headrooms_enter_interrupted_restores_the_limit() -> None:
    before = sys.getrecursionlimit()

    def load() -> None:
        with locate.recursion_headroom():
            pass

    kept = _kept_interrupt("recursion_headroom", load)
    assert kept is not None
    assert sys.getrecursionlimit() == before  # before: raised while the exception lived
    assert locate._Held.users == 0
    del kept
    gc.collect()
