"""An interrupt landing in a flush's wait for another thread's batch (BatchOwners.take,
then wait_mine for the batch it found in flight) is the interrupt, never RuntimeError.

``take`` waited for the batch in flight with ``Condition.wait`` under the owners' lock.
``Condition.wait`` is Python: an interrupt landing as its ``_release_save`` returns
leaves the lock released, and leaving the ``with`` block then raised RuntimeError
"cannot release un-acquired lock" in place of the KeyboardInterrupt (a program's
``except KeyboardInterrupt`` shutdown path never ran); ``wait_mine``'s wait likewise.
The sweep lands a KeyboardInterrupt on every function entry and C-call return of each in turn: the
flush raises KeyboardInterrupt (or completes), and the next flush stores every
acknowledged checkpoint.
"""

from __future__ import annotations

import gc
import sys
import threading
import time
from types import FrameType
from typing import Any

import pytest
from pg_cluster import backend_url, pg_cluster  # noqa: F401 - fixtures

import cpstore
from cpstore.store.batch_owners import BatchOwners


class _Landing:
    def __init__(self) -> None:
        self.k = self.seen = 0
        self.armed = False
        self.landed: str | None = None

    def profile(self, frame: FrameType, event: str, arg: object) -> None:
        if event not in ("call", "c_return"):
            return
        self.seen += 1
        if self.seen == self.k:
            sys.setprofile(None)
            self.landed = f"{frame.f_code.co_name}/{getattr(arg, '__name__', event)}"
            raise KeyboardInterrupt(f"at {self.landed}")


# A landing in a generator's close is printed as unraisable (the sweep's, not cpstore's).
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("where", ["take", "wait_mine"])
def test_an_interrupt_in_the_wait_for_a_batch_in_flight_is_the_interrupt(
    url: str, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    st = cpstore.open(url, durability="batched", batch_size=10_000)
    owners: BatchOwners[Any] = st._backend._owners
    landing = _Landing()
    real = getattr(BatchOwners, where)

    def swept(self: BatchOwners[Any], *args: Any) -> Any:
        if landing.armed and threading.current_thread() is threading.main_thread():
            landing.armed = False
            gc.disable()  # collector off while hooked: tests/trace_interrupts.py
            sys.setprofile(landing.profile)
            try:
                return real(self, *args)
            finally:
                sys.setprofile(None)
                gc.enable()
        return real(self, *args)

    monkeypatch.setattr(BatchOwners, where, swept)
    problems: list[str] = []
    try:
        for k in range(1, 500):
            rec = st.recorder(f"r{k}")
            ids = [rec.checkpoint(i, {"i": i}) for i in range(2)]
            flight = object()  # another thread's batch, in flight a while
            with owners._lock:
                owners._flying[id(flight)] = ([], [])

            def settle(key: int = id(flight)) -> None:
                time.sleep(0.12)
                with owners._lock:
                    owners._flying.pop(key, None)
                    owners._cond.notify_all()

            settler = threading.Thread(target=settle)
            settler.start()
            landing.k, landing.seen, landing.landed, landing.armed = k, 0, None, True
            try:
                st.flush()
            except KeyboardInterrupt:
                pass
            except BaseException as exc:  # before: RuntimeError at wait/_release_save
                problems.append(f"k={k} at {landing.landed}: {type(exc).__name__}: {exc}")
            finally:
                sys.setprofile(None)
                gc.enable()
                settler.join()
            st.flush()
            if [m.id for m in st.history(f"r{k}")] != ids[::-1]:
                problems.append(f"k={k} at {landing.landed}: not every checkpoint stored")
            if landing.landed is None:  # the wait ended before the k-th landing point
                break
        assert k > 3
        assert not problems, problems
    finally:
        sys.setprofile(None)
        gc.enable()
        st.close()
