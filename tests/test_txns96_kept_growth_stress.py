"""txns96: threads keeping and releasing slices, reading (some nested) beside map growth.

What review95 changed meets here at once: a thread whose only reads are kept waits for
another thread's growth (``kept_in`` in ``_enter_read``), a growth refuses once kept
views alone hold reads, released kept reads are handed over by any thread (``settle``)
and ended with every unused txn object freed in one pass (``_end_lost``). Run in a
fresh interpreter (``-X faulthandler``: a freed txn or an unmapped page kills it with its
stacks). Wanted: no hang (every thread ends within its bound), no kept slice reading
other bytes than it read inside its block (a page reused under it), every growth either
done or refused naming kept views, and once every slice is gone nothing kept, lost or
open, a handful of reader slots, and a close that closes.
"""

from __future__ import annotations

from pathlib import Path

from script_run import run_to_done

SCRIPT = r"""
import gc, os, queue, random, sys, threading
import cpstore
from cpstore.errors import ReadHeldDuringResizeError
from cpstore.store import kept_views

kept_views.KEPT_WAIT_SECONDS = 0.1
st = cpstore.open(sys.argv[1], map_size=1 << 20, durability="none")
env = st._backend.env
rec = st.recorder("r")
for i in range(24):
    rec.token("rng", f"value {i} " * 40)
cid = str(rec.checkpoint(0, {"a": 1}))
rec.close()
ROUNDS, BOUND = 300, 120.0
handed: queue.Queue = queue.Queue()
wrong: list = []
errors: list = []
grown, refused = [0], [0]
grown_here = [0]


def grow_now() -> None:
    # Every keeper let go of its slices: the map grows (a slice the releaser has not
    # dropped yet refuses a try; the next goes through).
    size = env.env.info()["map_size"]
    for _ in range(200):
        try:
            st.put_object(os.urandom(96 * 1024))
        except ReadHeldDuringResizeError:
            continue
        if env.env.info()["map_size"] > size:
            grown_here[0] += 1
            return


gate = threading.Barrier(3, action=grow_now)  # the keepers let go of every slice at once

def keeper(seed: int) -> None:
    rnd = random.Random(seed)
    mine: list = []
    try:
        for n in range(ROUNDS):
            if rnd.random() < 0.3:
                with st.read(cid) as outer:
                    with st.read(cid) as cp:
                        views = cp.token_value_views()
                        s = views[rnd.randrange(len(views))][2:]
                        mine.append((s, bytes(s)))
                    assert outer.token_count() == 24
            else:
                with st.read(cid) as cp:
                    views = cp.token_value_views()
                    s = views[rnd.randrange(len(views))][1:]
                    mine.append((s, bytes(s)))
            if len(mine) > 3:
                s, was = mine.pop(0)
                if bytes(s) != was:
                    wrong.append((bytes(s)[:20], was[:20]))
                if rnd.random() < 0.5:
                    handed.put((s, was))  # released on the releaser's thread
                del s
            if rnd.random() < 0.05:
                gc.collect()
            if n % 30 == 29:  # all let go a while: a growth may go through
                for s, was in mine:
                    if bytes(s) != was:
                        wrong.append((bytes(s)[:20], was[:20]))
                mine.clear()
                del s
                views = None
                gate.wait(60)
    except BaseException as exc:
        errors.append(repr(exc))
    finally:
        for s, was in mine:
            if bytes(s) != was:
                wrong.append((bytes(s)[:20], was[:20]))
        mine.clear()

def releaser(stop: threading.Event) -> None:
    while not stop.is_set() or not handed.empty():
        try:
            s, was = handed.get(timeout=0.05)
        except queue.Empty:
            continue
        if bytes(s) != was:
            wrong.append((bytes(s)[:20], was[:20]))
        del s, was
        with st.read(cid):  # this thread's read: settles what was released
            pass

def writer(stop: threading.Event) -> None:
    try:
        while not stop.is_set():
            try:
                st.put_object(os.urandom(96 * 1024))
                grown[0] += 1
            except ReadHeldDuringResizeError:
                refused[0] += 1
    except BaseException as exc:
        errors.append(repr(exc))

stop = threading.Event()
keepers = [threading.Thread(target=keeper, args=(s,)) for s in (1, 2, 3)]
others = [threading.Thread(target=releaser, args=(stop,)),
          threading.Thread(target=writer, args=(stop,))]
for t in keepers + others:
    t.start()
for t in keepers:
    t.join(BOUND)
hung = [t.name for t in keepers if t.is_alive()]
stop.set()
for t in others:
    t.join(BOUND)
hung += [t.name for t in others if t.is_alive()]
assert not hung, ("hung", hung)
assert not wrong, ("a kept slice read other bytes", wrong[:3])
assert not errors, errors
assert grown[0] > 0, (grown, refused)
assert grown_here[0] >= 5, grown_here  # grown between the slices' lives
gc.collect()
with st.read(cid) as cp:
    assert cp.state() == {"a": 1}
assert not env.kept and not env._lost and not env._active, (
    list(env.kept), list(env._lost), list(env._active))
slots = len(env.env.readers().splitlines()) - 1
assert slots < 16, slots
print("grown", grown, grown_here, "refused", refused, file=sys.stderr)
st.close()
assert env.closed
print("done", flush=True)
"""


def test_keeping_releasing_and_nested_reads_beside_growth_end_clean(tmp_path: Path) -> None:
    """Three threads keep, hand off and release slices (30 % inside nested reads) while a
    fourth grows a 1 MiB map: no hang, no changed slice, nothing left, the close closes."""
    run_to_done(SCRIPT, str(tmp_path / "s"), timeout=400.0)
