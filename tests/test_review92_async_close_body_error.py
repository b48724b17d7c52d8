"""review92: ``AsyncCpstoreSaver.from_conn_string``'s close interrupted while the block's
own exception leaves it (left90's retry loop with an exception being handled).

tests/test_begin_interrupted.py's sweep over ``_settled`` and the generator while an
``async with`` block raising ValueError exits under ``asyncio.run``: every C call's
return is a landing; the generator's resumption with the thrown ValueError is none (the
sweep counts no entry a signal cannot land at, since left93: CPython resumes a thrown
generator without its eval-breaker check, and the trace's "call" event there would unwind
the frame with no handler run). After each: the interrupt reaches the caller with the
block's ValueError as its context, the store is closed here and no descriptor is left on
its folder.
"""

from __future__ import annotations

import asyncio
import gc
import sys
from pathlib import Path

from test_begin_interrupted import _interrupting, fds_in

import cpstore
from cpstore.langgraph import AsyncCpstoreSaver
from cpstore.store import lmdb_registry

_FRAMES = frozenset({"_settled", "from_conn_string"})


def test_the_blocks_error_stays_the_context_and_the_store_closes(tmp_path: Path) -> None:
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        st.recorder("r").checkpoint(0, {"a": 1})
    wrong: list[str] = []
    k = 0
    while True:
        k += 1
        trace, landed = _interrupting(k, _FRAMES)

        async def block(trace: object = trace) -> None:
            async with AsyncCpstoreSaver.from_conn_string(path):
                sys.settrace(trace)  # type: ignore[arg-type]
                raise ValueError("the block's")

        got: BaseException | None = None
        gc.disable()
        try:
            asyncio.run(block())
        except BaseException as exc:  # kept, as a runtime logging it would
            got = exc
        finally:
            sys.settrace(None)
            gc.enable()
        if not landed:
            assert isinstance(got, ValueError), repr(got)
            break
        if not (isinstance(got, KeyboardInterrupt) and isinstance(got.__context__, ValueError)):
            wrong.append(f"{landed[0]}: raised {got!r}")
        if lmdb_registry.is_open_here(str(path)) or fds_in(path):
            wrong.append(f"{landed[0]}: left open")
        if wrong:
            break
        got = None
        gc.collect()
    assert wrong == []
    # _settled's start and its two C calls' returns (its resumptions after an await are
    # none: CPython resumes there without the eval-breaker check; swept before left93).
    assert k > 3
