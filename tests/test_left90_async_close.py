"""left90: ``AsyncCpstoreSaver.from_conn_string``'s close under an interrupt (a signal
handler's exception: a watchdog's alarm, Ctrl-C outside ``asyncio.run``'s own handler).

The block's exit awaited ``_settled(store.close, abandon=False)`` once. An interrupt
landing in ``_settled`` before the close reached the executor (its start,
``get_running_loop``'s and ``threading.Lock``'s returns) ran nothing of the close, and
the exception left the generator: the store stayed open in this process for its life
(registered with its handle and descriptors, a compaction here refused), and the caller
had only ``saver.store.close()`` to mend it (intr88's "Left"). The generator's ``finally``
now tries the close again after such an interrupt (each caught, the last raised after),
as the store layer's undo loops do; a second close of a closed store returns at once, and
one submitted beside a close still running waits for it.

tests/test_begin_interrupted.py's sweep lands at each frame start (each resumption too)
and C call's return of ``_settled`` and the generator while the block exits, the
exception kept as a caller logging it keeps it; after each the store is closed here, no
descriptor is left on its folder, and a compaction here and a reopen read the checkpoint.
The closes run in the loop's executor threads: a landing after the close was submitted
makes the retry's close run beside it.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from test_begin_interrupted import _interrupting
from test_intr88_saver_enter import _left, _reads

import cpstore
from cpstore.langgraph import AsyncCpstoreSaver

_FRAMES = frozenset({"_settled", "from_conn_string"})


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        cid = st.recorder("r").checkpoint(0, {"a": 1})
    return path, cid


def _exit_traced(path: Path, trace: Callable[..., Any], kept: list[BaseException]) -> None:
    """An ``async with`` block of the saver whose exit runs with ``trace`` set."""

    async def block() -> None:
        async with AsyncCpstoreSaver.from_conn_string(path) as saver:
            assert await saver.aget_tuple({"configurable": {"thread_id": "t"}}) is None
            sys.settrace(trace)  # from here on: the exit's frames

    gc.disable()  # collector off while traced: the exception alone keeps the frames
    try:
        asyncio.run(block())
    except KeyboardInterrupt as exc:
        kept.append(exc)  # kept, as a runtime logging it would
    finally:
        sys.settrace(None)
        gc.enable()


@pytest.mark.filterwarnings("ignore:coroutine '_settled' was never awaited")
def test_an_async_savers_close_interrupted_anywhere_closes_the_store(
    store: tuple[Path, str],
) -> None:
    path, cid = store
    wrong: list[str] = []
    k = 0
    while True:
        k += 1
        trace, landed = _interrupting(k, _FRAMES)
        kept: list[BaseException] = []
        _exit_traced(path, trace, kept)
        if not landed:
            break
        assert kept, landed  # the interrupt reached the caller
        # Before: "from_conn_string@192: open here" (the coroutine's creation), and
        # _settled's start, get_running_loop's and threading.Lock's returns.
        wrong += [f"{landed[0]}: {what}" for what in _left(path)]
        if wrong:
            break
        kept.clear()
        gc.collect()
    assert wrong == []
    assert k > 4
    _reads(path, cid)


def test_the_close_failing_after_an_interrupt_raises_its_own_error(
    store: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The retry's close failing (here: refused) raises that failure, noting the interrupt,
    and tries no more."""
    path, _ = store
    calls: list[int] = []
    real = cpstore.Store.close

    def failing(self: cpstore.Store) -> None:
        calls.append(1)
        real(self)
        raise cpstore.errors.StoreError("the close failed")

    monkeypatch.setattr(cpstore.Store, "close", failing)
    fired: list[str] = []

    def trace(frame: Any, event: str, arg: object) -> Any:
        if event == "call" and frame.f_code.co_name == "_settled" and not fired:
            fired.append("_settled@0")
            raise KeyboardInterrupt("_settled@0")
        return None

    async def block() -> None:
        async with AsyncCpstoreSaver.from_conn_string(path):
            sys.settrace(trace)

    got: BaseException | None = None
    try:
        asyncio.run(block())
    except BaseException as exc:  # before: the KeyboardInterrupt, the close never run
        got = exc
    finally:
        sys.settrace(None)
    assert fired == ["_settled@0"]
    assert isinstance(got, cpstore.errors.StoreError), repr(got)
    assert calls == [1]
    assert any("KeyboardInterrupt" in note for note in getattr(got, "__notes__", []))
    assert _left(path) == []
