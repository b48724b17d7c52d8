"""review93: put90's committed-tail guess under processes, threads, sweeps and reopens.

Three processes (``sync``, ``none``, ``batched``), two threads each, write one store that
starts with a 64 KiB map (it grows under them): checkpoints of new objects, a run deleted
(its newest heap entries swept, so the heap's last key moves down), the handle closed and
the store opened again in the same process (new heap handles, new tails). Every heap
append is compared with the cursor's answer read in its txn just before it (the heap's
last key + 1): a guess too low is refused by MDB_APPEND (IntegrityError on a sound store),
one too high leaves a gap no check sees. Held (review93): no error, every append where
the cursor says, the guess taken, the store verified.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cpstore

SCRIPT = r"""
import os, random, sys, threading
import cpstore
from cpstore.errors import CpstoreError, IntegrityError, StoreClosedError
from cpstore.store import content
from cpstore.store.heap_layout import next_seq

path, who, dur = sys.argv[1], sys.argv[2], sys.argv[3]
rnd = random.Random(who)
wrong, errors, guessed, cursor = [], [], [0], [0]
real_add, real_next = content.Content.add, content.next_seq


def counted_next(txn, heap):
    cursor[0] += 1
    return real_next(txn, heap)


def add(self, txn, key, *args):
    want = None if self.index is None else next_seq(txn, self.heap)  # the cursor's answer
    before = cursor[0]
    wrote = real_add(self, txn, key, *args)
    if wrote and want is not None:
        at = bytes(txn.get(key, None, self.index))
        if at != want:
            wrong.append((int.from_bytes(at, "big"), int.from_bytes(want, "big")))
        tail = content._TAILS.get(self.heap)
        if cursor[0] == before and tail is not None and tail.committed is not None:
            guessed[0] += 1
    return wrote


content.next_seq = counted_next
content.Content.add = add
box = [cpstore.open(path, durability=dur, map_size=1 << 16)]
lock = threading.Lock()


def work(t):
    for n in range(150):
        st = box[0]
        run = f"{who}-{t}-{n // 4}"
        try:
            r = rnd.random()
            if r < 0.75:
                with st.recorder(run) as rec:
                    for k in range(rnd.randint(1, 3)):
                        rec.checkpoint(n * 10 + k, {"x": os.urandom(rnd.randint(8, 2000)).hex()})
                if dur == "batched":
                    st.flush()
            elif r < 0.93:
                st.delete_run(run)
            else:
                with lock:
                    if box[0] is st:
                        st.close()
                        box[0] = cpstore.open(path, durability=dur, map_size=1 << 16)
        except IntegrityError as exc:
            errors.append(repr(exc))
        except StoreClosedError:
            pass  # this process's other thread closed the handle under it (reopened)
        except CpstoreError as exc:
            if type(exc).__name__ not in ("ConflictError", "NotFoundError"):
                errors.append(repr(exc))


threads = [threading.Thread(target=work, args=(t,)) for t in range(2)]
for th in threads:
    th.start()
for th in threads:
    th.join()
box[0].close()
print(len(wrong), len(errors), guessed[0], repr(wrong[:3] + errors[:3]))
"""


def test_processes_threads_sweeps_and_reopens_append_where_the_cursor_says(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "s")
    cpstore.open(path).close()
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SCRIPT, path, f"p{i}", dur],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, dur in enumerate(("sync", "none", "batched"))
    ]
    guessed = 0
    for proc in procs:
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-3000:]
        wrong, errors, took, said = out.split(maxsplit=3)
        assert (wrong, errors) == ("0", "0"), said
        guessed += int(took)
    assert guessed > 0  # the guess was taken, not only the cursor
    st = cpstore.open(path)
    report = st.verify()
    assert report.ok, report.problems
    st.close()
