"""The chaos worker process (tests/chaos_process.py) never dies or goes quiet on documented
store behaviour, and never drops a defect unlogged; the kill loop never restarts a worker
that died by itself without saying so; the reader's checks do not race the mix.

Each test fails on the harness before its fix (chaos3 audit, 2026-12-02).
"""

from __future__ import annotations

import json
import multiprocessing
import random
import threading
import time
from pathlib import Path
from typing import Any

import chaos_process
import pytest
from chaos_compactor import set_deadline
from chaos_log import Log
from chaos_process import head_problem, pin_problem, work
from chaos_roles import batched_writer
from chaos_worker import Worker
from test_chaos_mutations import _unkilled

import cpstore
from cpstore.errors import IntegrityError, StoreConnectionError


def _lines(logdir: Path) -> list[dict[str, Any]]:
    return [json.loads(r) for r in (logdir / "w0.log").read_text().splitlines()]


def _run_work(tmp_path: Path, seconds: float, **kw: Any) -> Path:
    """``work`` in this process for ``seconds`` on a fresh store; its log folder."""
    store, logdir = tmp_path / "s", tmp_path / "logs"
    logdir.mkdir()
    cpstore.open(store).close()
    set_deadline(str(logdir), time.monotonic() + seconds)
    work(str(store), str(logdir), 0, 0, seed=7, map_size=1 << 22, **kw)
    return logdir


class _HeadUnreadable(Worker):
    """A Worker whose first construction meets the server restarting (its head read)."""

    failed = 0

    def __init__(self, *args: Any) -> None:
        if _HeadUnreadable.failed == 0:
            _HeadUnreadable.failed += 1
            raise StoreConnectionError("the connection to the server was lost or refused")
        super().__init__(*args)


def test_a_session_whose_head_read_fails_is_logged_and_the_worker_still_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Worker() reads its run's head; a StoreConnectionError there (PostgreSQL restarting)
    is documented: logged, the store reopened, the process ends with its "end" (it exited
    1 with no "end" and nothing logged: the gap behind CI's unexplained worker deaths)."""
    monkeypatch.setattr(chaos_process, "Worker", _HeadUnreadable)
    _HeadUnreadable.failed = 0
    lines = _lines(_run_work(tmp_path, 3.0))
    errs = [r for r in lines if r["ev"] == "err" and r["op"] == "session"]
    assert errs and errs[0]["err"] == "StoreConnectionError"
    assert lines[-1]["ev"] == "end" and not [r for r in lines if r["ev"] == "defect"]


def test_a_raw_error_outside_any_logged_call_is_a_defect_in_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A non-CpstoreError escaping the session (not through Worker.call) is logged as a
    defect with its traceback before the process dies, not only printed to stderr."""

    def broken(*_: Any) -> None:
        raise KeyError("raw")

    monkeypatch.setattr(chaos_process, "Worker", broken)
    with pytest.raises(KeyError):
        _run_work(tmp_path, 1.0)
    defects = [r for r in _lines(tmp_path / "logs") if r["ev"] == "defect"]
    assert [(d["op"], d["err"]) for d in defects] == [("session", "KeyError")]


def test_an_integrity_error_outside_call_is_a_defect_and_one_through_call_is_logged_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mix's loop caught every CpstoreError silently: an IntegrityError raised by a
    read outside Worker.call (e.g. st.read, st.history) went unseen. Now it is a defect;
    one call() logged already is not logged twice."""

    calls = {"n": 0}

    def audit(self: Worker) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise IntegrityError("a hash mismatch outside call", where="objects/x")
        if calls["n"] > 2:
            time.sleep(0.05)  # both kinds raised: idle to the deadline
            return

        def bad() -> None:
            raise IntegrityError("a hash mismatch inside call", where="objects/y")

        self.call("audit", bad)

    monkeypatch.setattr(chaos_process, "OPS", [("audit", 1)])
    monkeypatch.setattr(Worker, "op_audit", audit)
    lines = _run_work(tmp_path, 3.0)
    defects = [r for r in _lines(lines) if r["ev"] == "defect"]  # main loop, racer or writer
    outside = [d for d in defects if "outside call" in d["tb"]]
    inside = [d for d in defects if "inside call" in d["tb"]]
    assert calls["n"] > 2 and all(d["err"] == "IntegrityError" for d in defects)
    assert len(outside) == 1 and len(inside) == 1  # each once: call()'s not again


def test_the_batched_writer_thread_outlives_a_failed_head_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its handler for a failed checkpoint read the head again (fresh_main); that read
    failing too (the server restarting) ended the thread with a traceback on stderr."""
    calls = {"n": 0}
    real = Worker.fresh_main

    def flaky(self: Worker) -> Any:
        calls["n"] += 1
        if 2 <= calls["n"] <= 4:
            raise StoreConnectionError("the connection to the server was lost or refused")
        return real(self)

    def own(self: Worker) -> None:
        raise StoreConnectionError("lost while committing")

    monkeypatch.setattr(Worker, "fresh_main", flaky)
    monkeypatch.setattr(Worker, "op_own", own)
    with cpstore.open(tmp_path / "s", durability="batched", batch_size=4) as st:
        w = Worker(st, Log(str(tmp_path / "w0.log"), 0, 0), random.Random(3), "w0")
        batched_writer(w, time.monotonic() + 2.0, threading.Event())  # must not raise
    assert calls["n"] > 4  # it went on reading the head after the failures


def test_a_head_swept_after_it_moved_on_is_no_reader_defect(tmp_path: Path) -> None:
    """The reader reads a head, then verifies it: a prune between the two may sweep it
    once the head moved on (retention), which it logged as a defect; a head that is still
    the head and fails is one."""
    with cpstore.open(tmp_path / "s") as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(4)]
        refs = iter([ids[0], ids[3]])  # read before the prune, then after it

        class Moved:
            def ref(self, run: str) -> str | None:
                return next(refs)

            def verify_checkpoint(self, cid: str) -> Any:
                return st.verify_checkpoint(cid)

        assert st.prune(keep_last=1) == 3
        assert head_problem(Moved(), "r") is None  # type: ignore[arg-type]
        stuck = iter([ids[0], ids[0]])

        class Stuck(Moved):
            def ref(self, run: str) -> str | None:
                return next(stuck)

        why = head_problem(Stuck(), "r")  # type: ignore[arg-type]
        assert why is not None and ids[0] in why


def test_a_pin_being_unpinned_is_no_reader_defect(tmp_path: Path) -> None:
    """The main thread takes a pin off its list, then unpins it (a sweep may then take
    it): a reader that picked it before sees it gone (a race); one still on the list and
    gone is a lost pin."""

    class Gone:  # the store after the unpin and a sweep
        def has_object(self, digest: str) -> bool:
            return False

    d = "ab" * 16
    assert pin_problem(Gone(), [], d) is None  # type: ignore[arg-type]
    why = pin_problem(Gone(), [d], d)  # type: ignore[arg-type]
    assert why is not None and d in why
    with cpstore.open(tmp_path / "s") as st:
        kept = st.put_object(b"kept").hex()
        assert pin_problem(st, [kept], kept) is None


def _exit_1() -> None:
    raise SystemExit(1)


def test_a_worker_found_dead_at_its_kill_is_reported_with_its_last_lines(
    tmp_path: Path,
) -> None:
    """The kill loop restarted a worker it found dead without a word (only the last
    incarnation's missing "end" could tell); now it says which died, how, and its log;
    one that ended cleanly (a kill delayed past the deadline) is no death."""
    Log(str(tmp_path / "w0.log"), 0, 2).write("b", sync=True, op="own", id="0.2.1")
    p = multiprocessing.get_context("spawn").Process(target=_exit_1)
    p.start()
    p.join(timeout=60)
    why = _unkilled(p, tmp_path, 0, 2)
    assert why is not None and "code 1" in why and "0.2.1" in why
    Log(str(tmp_path / "w0.log"), 0, 3).write("end", sync=True)
    done = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(0,))
    done.start()
    done.join(timeout=60)
    assert _unkilled(done, tmp_path, 0, 3) is None  # ended cleanly: a kill came late
    alive = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(30,))
    alive.start()
    try:
        assert _unkilled(alive, tmp_path, 0, 2) is None
    finally:
        alive.kill()
        alive.join()
