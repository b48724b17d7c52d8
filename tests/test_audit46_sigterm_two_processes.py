"""``durability="sync"``: two processes of grouping threads on one store; one gets SIGTERM
(its handler calls ``sys.exit(3)``) while its threads commit. The survivor's checkpoints
all land; every checkpoint the killed process acknowledged (printed) is stored; the killed
process exits with the handler's code (the exception raised as it is, never swallowed nor
wrapped), and no thread of either hangs.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import cpstore

WRITER = r"""
import signal, sys, threading
import cpstore
path, tag, per = sys.argv[1], sys.argv[2], int(sys.argv[3])
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(3))
st = cpstore.open(path, durability="sync")
lock = threading.Lock()

def write(name):
    rec = st.recorder(name)
    for step in range(per):
        cid = rec.checkpoint(step, {"step": step})
        with lock:
            # One write call: print() writes each field and the separators on its own,
            # so the handler's SystemExit could land inside a line and leave it cut,
            # a worker's line then run on after it (ci83: "too many values to unpack").
            sys.stdout.write(f"{name} {step} {cid}\n")
            sys.stdout.flush()

workers = [threading.Thread(target=write, args=(f"{tag}-{t}",)) for t in range(4)]
for t in workers:
    t.start()
write(f"{tag}-main")
for t in workers:
    t.join()
st.close()
print("done", flush=True)
"""


def _start(path: Path, tag: str, per: int) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-X", "faulthandler", "-c", WRITER, str(path), tag, str(per)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("after", [3, 20, 60])
def test_sigterm_to_one_of_two_sync_processes(tmp_path: Path, after: int) -> None:
    path = tmp_path / "s"
    cpstore.open(str(path), durability="sync").close()
    killed = _start(path, "k", 150)
    survivor = _start(path, "s", 40)
    lines: list[str] = []
    assert killed.stdout is not None
    for line in killed.stdout:
        lines.append(line)
        if len(lines) == after:
            killed.send_signal(signal.SIGTERM)
            break
    reader = threading.Thread(target=lambda: lines.extend(killed.stdout or []))
    reader.start()
    k_err = killed.stderr.read() if killed.stderr else ""
    assert killed.wait(300) == 3, k_err[-3000:]
    reader.join(60)
    s_out, s_err = survivor.communicate(timeout=300)
    assert survivor.returncode == 0 and s_out.endswith("done\n"), s_err[-3000:]
    acked = [line.split() for line in lines if line.strip() and line.strip() != "done"]
    survived = [line.split() for line in s_out.splitlines() if line != "done"]
    assert len(survived) == 5 * 40
    with cpstore.open(str(path), durability="sync") as st:
        assert st.verify().ok
        for _name, step, cid in acked + survived:
            with st.read(cid) as cp:
                assert cp.state() == {"step": int(step)}
        for t in ["0", "1", "2", "3", "main"]:  # each survivor's chain whole, in order
            assert [m.step for m in st.history(f"s-{t}")] == list(range(39, -1, -1))
