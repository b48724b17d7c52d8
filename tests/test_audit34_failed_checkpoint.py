"""audit34: a checkpoint that is not stored leaves nothing of its state queued.

A recorder keeps the objects it has not committed yet (observation and effect payloads,
log objects) in one queue, and a checkpoint's state parts went into that queue too. When
the commit failed (the map full at its limit, a read held while the map must grow), the
state's objects stayed queued and rode along with every later checkpoint of the recorder:
after one state too large for the map, every later checkpoint of that recorder, however
small, was refused ``StoreFullError`` too (in a group commit, each group it joined failed
and was committed again one write per txn); after a failure that does not recur, the next
checkpoint stored the failed state's objects although no checkpoint names them, and an
object no checkpoint names is never swept (docs/store.md, "Retention").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from cpstore.errors import CanonicalEncodingError, ReadHeldDuringResizeError, StoreFullError
from cpstore.native.append_log import AppendLog
from cpstore.native.binding import digest
from cpstore.native.canonical import encode_value
from cpstore.replay.session import ReplaySession
from cpstore.store.facade import open as open_store

MAP = 1 << 20  # a map that cannot grow: a state of 2 MiB never fits
MARKER = "audit34 marker: a state part only the failed checkpoint names"


def _marker_stored(path: Path) -> bool:
    with open_store(path) as st:
        return st.has_object(digest(encode_value(MARKER)))


class TestOneRecorder:
    def test_the_recorder_stores_again_after_a_state_too_large_for_the_map(
        self, tmp_path: Path
    ) -> None:
        """StoreFullError for the large state; the same recorder's next, small one is stored."""
        path = tmp_path / "s"
        with open_store(path, map_size=MAP, max_map_size=MAP) as st:
            rec = st.recorder("r")
            rec.observe(0, "cfg", b"cfg", pinned_at=0.0)
            first = rec.checkpoint(0, {"a": "small"})
            rec.observe(1, "db", b"row", pinned_at=1.0)  # queued across the failure
            with pytest.raises(StoreFullError):
                rec.checkpoint(1, {"big": os.urandom(2 << 20), "m": MARKER})
            after = rec.checkpoint(2, {"a": "small again"})  # StoreFullError before the fix
            assert st.ref("r") == after
            with st.read(after) as cp:
                assert cp.state() == {"a": "small again"}
                assert cp.manifest.parent == first
                assert ReplaySession(cp).observations.read(1, "db") == b"row"  # queued before
            report = st.verify()
            assert report.ok, report.problems
        assert not _marker_stored(path)

    def test_a_checkpoint_refused_for_a_held_read_leaves_no_object_behind(
        self, tmp_path: Path
    ) -> None:
        """The map must grow while this thread holds a read: refused, and the next checkpoint
        stores none of the refused state's objects (no checkpoint names them: never swept)."""
        path = tmp_path / "s"
        with open_store(path, map_size=64 * 1024) as st:
            rec = st.recorder("r")
            head = rec.checkpoint(0, {"a": "small"})
            with st.read(head), pytest.raises(ReadHeldDuringResizeError):
                rec.checkpoint(1, {"big": os.urandom(256 * 1024), "m": MARKER})
            after = rec.checkpoint(2, {"a": "x"})
            with st.read(after) as cp:
                assert cp.state() == {"a": "x"}
            report = st.verify()
            assert report.ok, report.problems
        assert not _marker_stored(path)  # stored, named by nothing, before the fix

    def test_parts_of_a_failed_checkpoint_given_again_are_stored(self, tmp_path: Path) -> None:
        """The same str/bytes part objects (the recorder's unchanged-part cache), an AppendLog
        and a long list given to a failed checkpoint and again to the next: stored whole."""
        path = tmp_path / "s"
        text, raw = "t" * 3000, os.urandom(3000)
        log = AppendLog([{"i": i, "pad": "p" * 40} for i in range(300)])
        items = [{"j": j, "pad": "q" * 40} for j in range(300)]
        with open_store(path, map_size=MAP, max_map_size=MAP) as st:
            rec = st.recorder("r")
            rec.checkpoint(0, {"text": text, "raw": raw, "log": log, "items": items})
            log.append({"i": 300})
            items.append({"j": 300})
            text2 = "u" * 3000
            with pytest.raises(StoreFullError):
                rec.checkpoint(
                    1,
                    {
                        "text": text2,
                        "raw": raw,
                        "log": log,
                        "items": items,
                        "big": os.urandom(2 << 20),
                    },
                )
            with pytest.raises(CanonicalEncodingError):  # refused while the state is built
                rec.checkpoint(2, {"text": text2, "log": log, "bad": object()})
            cid = rec.checkpoint(3, {"text": text2, "raw": raw, "log": log, "items": items})
            with st.read(cid) as cp:
                state = cp.state()
            assert state == {"text": text2, "raw": raw, "log": list(log), "items": items}
            report = st.verify()
            assert report.ok, report.problems


_WRITER = """
import json, os, sys, threading
import cpstore
from cpstore.errors import StoreFullError
path, name = sys.argv[1], sys.argv[2]
st = cpstore.open(path, map_size={map}, max_map_size={map})
out, lock = [], threading.Lock()
def write(t):
    rec = st.recorder(f"{{name}}-{{t}}")
    for step in range(12):
        big = t == 0 and step % 3 == 1
        state = {{"s": f"{{name}}.{{t}}.{{step}}"}}
        if big:
            state["big"] = os.urandom(2 << 20)
        try:
            cid = rec.checkpoint(step, state)
            got = ["ok", cid, state["s"]]
        except StoreFullError:
            got = ["full", None, state["s"]]
        with lock:
            out.append([big, *got])
threads = [threading.Thread(target=write, args=(t,)) for t in range(3)]
for th in threads: th.start()
for th in threads: th.join()
st.close()
print(json.dumps(out))
"""


def _run_writer(path: str, name: str) -> str:
    script = _WRITER.format(map=MAP)
    done = subprocess.run(
        [sys.executable, "-c", script, path, name],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


class TestGroupCommitProcesses:
    def test_a_thread_refused_a_too_large_state_keeps_storing_beside_grouping_threads(
        self, tmp_path: Path
    ) -> None:
        """Two processes of three grouping threads, one thread in each sometimes refused
        StoreFullError: every other checkpoint, of every thread, is stored and readable."""
        path = tmp_path / "s"
        with open_store(path, map_size=MAP, max_map_size=MAP):
            pass
        results: dict[str, str] = {}

        def run(name: str) -> None:
            results[name] = _run_writer(str(path), name)

        # Threads here only wait for the two writer processes (each spawned by subprocess).
        waiters = [threading.Thread(target=run, args=(f"p{i}",)) for i in range(2)]
        for w in waiters:
            w.start()
        for w in waiters:
            w.join(320)
        assert sorted(results) == ["p0", "p1"]
        outcomes = [row for out in results.values() for row in json.loads(out)]
        refused = [row for row in outcomes if row[1] != "ok"]
        assert all(big for big, *_ in refused), refused  # only the large states refused
        assert sum(1 for big, *_ in outcomes if big) == len(refused) == 8
        with open_store(path) as st:
            for _, kind, cid, s in outcomes:
                if kind == "ok":
                    with st.read(cid) as cp:
                        assert cp.state() == {"s": s}
            report = st.verify()
            assert report.ok, report.problems
