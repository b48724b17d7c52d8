"""A close's outcome is published whatever lands at its end (registry102).

A look at a store (``is_open_here``, compact, an open) waits for a close of its
environment under way (registry100: the registry's own close of one a close left open;
registry102: a user's last close too), bounded at 3 x ``CLOSE_WAIT_SECONDS`` (15 s), and
is woken by the close's ``done``. That was a ``threading.Event`` set in the close's last
``finally``: ``Event.set`` is Python, so an interrupt (a signal handler's exception, a
KeyboardInterrupt) landing at its start, or in the ``Condition`` it takes, left it unset,
and every look waiting for that close sat out its whole bound. ``done`` is now a lock let
go by one C call (no landing before it), after the close's entry is forgotten, each
interrupt landing in the forgetting caught.

The sweep of tests/test_begin_interrupted.py (a KeyboardInterrupt at each frame start and
C call return in the named frames, in turn) over a main-thread close: the registry's close
of an environment a close left open (run by the next look, ``is_open_here``), and a user's
last close. After each landing, at once (no waiting, no timing): no close is pending in
the registry and every close made is published (its ``done`` let go: a look waiting on it
is woken, not left to its bound).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from left_open import left_open
from test_begin_interrupted import interrupted_at, sweep_landings

import cpstore
from cpstore.store import lmdb_registry, lmdb_registry_state, lmdb_txns

#: The frames swept (qualified names): the closes, and what their ends call.
_NAMES = frozenset(
    {
        "_close_left_open_once",
        "release_env",
        "_unregister",
        "LeftOpenClose.__init__",
        "LeftOpenClose.ended",
        "Event.set",  # before registry102: the close's ``done``
        "Condition.__enter__",
        "Condition.__exit__",
        "Condition.notify",
        "Condition.notify_all",
    }
)


def _published(close: Any) -> bool:
    """Whether ``close``'s outcome is published (its ``done``: a lock let go; an Event
    set before registry102)."""
    done = close.done
    return done.is_set() if isinstance(done, threading.Event) else not done.locked()


def _sweep(
    monkeypatch: pytest.MonkeyPatch, fresh: Callable[[], Callable[[], Any]], path: str
) -> list[str]:
    """Each landing in ``fresh()``'s call (made anew each time, untraced); what it left
    pending or unpublished."""
    registered: list[Any] = []

    class Recording(dict):  # type: ignore[type-arg]
        """The registry's closes under way, each one put there kept for the check."""

        def __setitem__(self, env: Any, close: Any) -> None:
            registered.append(close)
            super().__setitem__(env, close)

    closing = Recording()
    monkeypatch.setattr(lmdb_registry_state, "_CLOSING_LEFT", closing)
    monkeypatch.setattr(lmdb_registry, "_CLOSING_LEFT", closing)

    def interrupt(k: int) -> list[str]:
        registered.clear()
        call = fresh()
        return interrupted_at(k, _NAMES, call, qualified=True)

    def left_wrong() -> str | None:
        if closing:
            return "a close left pending"
        if not all(_published(close) for close in registered):
            return "a close's outcome unpublished: a look waiting for it sits out its bound"
        gc.collect()
        if lmdb_registry.is_open_here(path):  # closes what the landing left open
            return "left open here"
        return None

    return sweep_landings(interrupt, left_wrong, at_least=6)


def test_the_registrys_close_interrupted_at_any_point_publishes_its_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The close an ``is_open_here`` runs of an environment a close left open."""
    monkeypatch.setattr(lmdb_txns, "CLOSE_WAIT_SECONDS", 0.05)
    path = str(tmp_path / "s")
    cid = left_open(path)

    def fresh() -> Callable[[], Any]:
        if not lmdb_registry_state._LEFT_OPEN:  # closed by the last run: left open again
            left_open(path)
        return lambda: lmdb_registry.is_open_here(path)

    assert _sweep(monkeypatch, fresh, path) == []
    assert not lmdb_registry.is_open_here(path)
    with cpstore.open(path) as st, st.read(cid) as cp:
        assert cp.state() == {"a": 1}
        assert st.verify().ok


@pytest.mark.parametrize("durability", ["sync", "none"])
def test_a_users_last_close_interrupted_at_any_point_publishes_its_outcome(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, durability: str
) -> None:
    """A user's last close (release_env's own entry since registry102)."""
    path = str(tmp_path / "s")
    with cpstore.open(path) as st:
        cid = st.recorder("r").checkpoint(0, {"a": 1})

    def fresh() -> Callable[[], Any]:
        return cpstore.open(path, durability=durability).close  # type: ignore[arg-type]

    assert _sweep(monkeypatch, fresh, path) == []
    assert not lmdb_registry.is_open_here(path)
    with cpstore.open(path) as st, st.read(cid) as cp:
        assert cp.state() == {"a": 1}
        assert st.verify().ok


@pytest.mark.parametrize("ended", [True, False])
def test_a_waiter_interrupted_in_its_wait_never_keeps_the_closes_done(ended: bool) -> None:
    """A look waiting for a close (``LeftOpenClose.wait``) interrupted at each landing:
    the close's ``done`` is as the close left it (held while under way, let go once
    ended), never kept by the waiter (every other look would then wait out its bound)."""
    done = lmdb_registry_state.LeftOpenClose()
    if ended:
        done.done.release()

    def interrupt(k: int) -> list[str]:
        return interrupted_at(k, {"LeftOpenClose.wait"}, lambda: done.wait(0.01), qualified=True)

    def left_wrong() -> str | None:
        return None if done.ended() == ended else f"ended {done.ended()}"

    assert sweep_landings(interrupt, left_wrong, at_least=2) == []
    assert done.wait(0.01) == ended
