"""audit34: writer processes SIGKILLed at once while they group, race a branch and grow the map.

What the other crash tests leave out, together: several writer processes running at the
same time (``sync`` ones whose threads group their commits, and a ``none`` one), a branch
all of them race for (each step a fresh recorder on its head, so ConflictError is an
answer), a map of 64 KiB that every process must grow or adopt again and again, a reader
process holding snapshots, and every writer SIGKILLed while the others go on. After two
rounds: every acknowledged checkpoint reads back with its own state and is in its branch's
history, no checkpoint refused with ConflictError is in any history, no writer met any other
error, and ``verify()`` is clean. (Found clean by audit34; it pins the contract.)
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO

from cpstore.store.facade import open as open_store

_WRITER = """
import os, random, sys, threading, time, traceback
import cpstore
from cpstore.errors import ConflictError, CpstoreError
path, mode, tag = sys.argv[1], sys.argv[2], sys.argv[3]
st = cpstore.open(path, durability=mode, map_size=64 * 1024)
lock = threading.Lock()
def out(*words):
    with lock:
        print(*words, flush=True)
def write(t):
    r = random.Random(f"{tag}.{t}")
    shared = t == 0
    run = "shared" if shared else f"{tag}-t{t}"
    rec = None
    for step in range(100000):
        tok = f"{tag}.{t}.{step}"
        try:
            if rec is None or shared:
                rec = st.recorder(run)
            pad = os.urandom(r.choice([5, 500, 5000, 20000])).hex()
            cid = rec.checkpoint(time.time_ns() if shared else step, {"tok": tok, "pad": pad})
            out("ACK", cid, run, tok)
            if mode == "none" and step % 7 == 0:
                st.flush()
        except ConflictError:
            out("CONFLICT", run, tok)
            rec = None
        except BaseException as exc:
            out("ERR", type(exc).__name__, run, tok, repr(exc).replace(chr(10), " ")[:400])
            rec = None
for t in range(3):
    threading.Thread(target=write, args=(t,), daemon=True).start()
threading.Event().wait()
"""

_READER = """
import sys, time
import cpstore
st = cpstore.open(sys.argv[1])
while True:
    for run in st.runs():
        head = st.ref(run)
        if head is not None:
            with st.read(head) as cp:
                time.sleep(0.02)
                assert "tok" in cp.state()
"""


def _acks(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if line.startswith("ACK "))


def _spawn(script: str, args: list[str], log: Path) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    out = log.open("wb")
    child = subprocess.Popen([sys.executable, "-c", script, *args], stdout=out, stderr=out)
    return child, out


def _kill(child: subprocess.Popen[bytes], out: IO[bytes]) -> None:
    child.send_signal(signal.SIGKILL)
    child.wait(60)
    out.close()


def _wait_for_acks(logs: list[Path], least: int, children: list[subprocess.Popen[bytes]]) -> None:
    """Until every log shows ``least`` acknowledged checkpoints (a child that died: fail)."""
    deadline = time.monotonic() + 180
    while any(_acks(log) < least for log in logs):
        for child, log in zip(children, logs, strict=True):
            assert child.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, "writers acknowledged too little in 3 minutes"
        time.sleep(0.05)


def test_concurrent_writer_processes_killed_lose_nothing_acknowledged(tmp_path: Path) -> None:
    path, logs = tmp_path / "s", tmp_path / "logs"
    logs.mkdir()
    with open_store(path, map_size=64 * 1024):
        pass
    rnd = random.Random(34)
    reader, reader_out = _spawn(_READER, [str(path)], logs / "reader.log")
    try:
        for round_ in range(2):
            started = [
                (
                    *_spawn(
                        _WRITER, [str(path), mode, f"r{round_}w{i}"], logs / f"r{round_}w{i}.log"
                    ),
                    logs / f"r{round_}w{i}.log",
                )
                for i, mode in enumerate(["sync", "sync", "none"])
            ]
            _wait_for_acks([s[2] for s in started], 5, [s[0] for s in started])
            for child, out, _ in started:  # one by one, the others still writing
                time.sleep(rnd.uniform(0.05, 0.6))
                _kill(child, out)
    finally:
        _kill(reader, reader_out)
    acked: dict[str, tuple[str, str]] = {}
    refused: set[str] = set()
    problems: list[str] = []
    for log in sorted(logs.glob("r*w*.log")):
        for line in log.read_text().splitlines():
            words = line.split()
            if words[:1] == ["ACK"] and len(words) == 4:
                acked[words[1]] = (words[2], words[3])
            elif words[:1] == ["CONFLICT"] and len(words) == 3:
                refused.add(words[2])
            elif line.strip():
                problems.append(f"{log.name}: {line[:600]}")  # an error, or a torn last line
    # A line the SIGKILL cut short is the last one of its log, at most one per writer.
    assert len(problems) <= 6 and all(" ERR " not in p and "Error" not in p for p in problems), (
        problems
    )
    assert len(acked) >= 30
    with open_store(path) as st:
        report = st.verify()
        assert report.ok, report.problems
        in_history: dict[str, str] = {}
        for run in st.runs():
            for entry in st.history_states(run):
                state = entry.state
                assert isinstance(state, dict)
                in_history[state["tok"]] = entry.manifest.id
        for cid, (run, tok) in acked.items():
            with st.read(cid) as cp:
                state = cp.state()
                assert isinstance(state, dict) and state["tok"] == tok, (cid, run, tok)
            assert in_history.get(tok) == cid, f"acknowledged {cid} ({tok}) not in {run}'s history"
        assert not refused & set(in_history), refused & set(in_history)
