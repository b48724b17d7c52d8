"""A txn carrying the checkpoints of several recorders (a group commit of several
threads, a batch of several recorders) reads each checkpoint's part locations once per
txn (commit.TxnChecked): the first checkpoint of a recorder in the txn reads them (its
changed part is already known, appended by the txn), its later ones are answered from
what the txn remembered. Every checkpoint's stored hint block must be where its parts are.

Oracle independent of the write path: after all commits, each checkpoint's hints (as
stored in its record) equal the locations of its parts read afresh, one key at a time
(locations never move once written), and every state reads back whole.
"""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path

import pytest

import cpstore
from cpstore.store.content import objects_of, records_of
from cpstore.store.facade import Store

_PARTS = 10
_WRITERS = 4


def _states(writer: int, steps: int) -> list[dict[str, str]]:
    """``steps`` states of 10 parts of this writer's own values, one part new per step."""
    state = {f"p{i}": f"w{writer} value {i} " * 30 for i in range(_PARTS)}
    out = []
    for step in range(steps):
        state[f"p{step % _PARTS}"] = f"w{writer} step {step} " * 30
        out.append(dict(state))
    return out


def _check(store: Store, ids: dict[str, list[str]]) -> int:
    """Each checkpoint's stored hints are its parts' locations, read one key at a time; its
    state reads back whole. Returns how many checkpoints were checked."""
    dbs = store.backend.dbs
    records, objects = records_of(dbs), objects_of(dbs)
    checked = 0
    for name, cids in ids.items():
        writer = int(name.removeprefix("w").split("-")[0]) % _WRITERS
        states = _states(writer, len(cids))
        for cid, state in zip(cids, states, strict=True):
            with store.read(cid) as view:
                parts = [bytes(d) for d in view.manifest.raw["state"]["parts"].values()]
                assert view.state() == state
            with store.backend.env.env.begin(buffers=True) as txn:
                hints = bytes(records.hinted(txn, bytes.fromhex(cid))[1])
                one_by_one = b"".join(objects.locations(txn, [key])[4:] for key in parts)
            assert len(hints) == 4 * _PARTS
            assert hints == one_by_one
            assert hints != bytes(4 * _PARTS)  # real locations, not "unknown"
            checked += 1
    return checked


@pytest.mark.parametrize("rounds", [1, 2, 3])
def test_a_batch_of_several_recorders_stores_each_ones_part_locations(
    tmp_path: Path, rounds: int
) -> None:
    """Deterministic: a batch carries ``rounds`` checkpoints of each of 4 recorders, so each
    recorder's first location read in a txn is that txn's first of those keys (answered
    as read), and its later ones in the txn are answered from what that read remembered."""
    steps = 42
    batch = _WRITERS * rounds
    with cpstore.open(tmp_path / "s", durability="batched", batch_size=batch) as store:
        recs = {f"w{i}": store.recorder(f"w{i}") for i in range(_WRITERS)}
        states = {name: _states(i, steps) for i, name in enumerate(recs)}
        ids: dict[str, list[str]] = {name: [] for name in recs}
        for step in range(steps):
            for name, rec in recs.items():
                ids[name].append(rec.checkpoint(step, states[name][step]))
        store.flush()
        assert _check(store, ids) == _WRITERS * steps


def _threads(path: str, prefix: str, steps: int) -> dict[str, list[str]]:
    """4 writer threads, each its own recorder, on one sync store (group commit)."""
    ids: dict[str, list[str]] = {}
    errors: list[BaseException] = []
    with cpstore.open(path, durability="sync") as store:

        def write(i: int) -> None:
            name = f"w{i}-{prefix}"
            try:
                rec = store.recorder(name)
                ids[name] = [rec.checkpoint(s, st) for s, st in enumerate(_states(i, steps))]
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(i,)) for i in range(_WRITERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if errors:
        raise errors[0]
    return ids


def test_group_commits_of_four_threads_store_each_ones_part_locations(tmp_path: Path) -> None:
    ids = _threads(str(tmp_path / "s"), "t", 30)
    with cpstore.open(tmp_path / "s") as store:
        assert _check(store, ids) == _WRITERS * 30


def _child(path: str, prefix: str, out: multiprocessing.Queue[dict[str, list[str]]]) -> None:
    out.put(_threads(path, prefix, 20))


def test_group_commits_of_threads_in_two_processes_store_each_ones_part_locations(
    tmp_path: Path,
) -> None:
    """Two processes, 4 writer threads each, on one store: each process groups its own
    threads' checkpoints, the processes take LMDB's writer lock in turn."""
    path = str(tmp_path / "s")
    cpstore.open(path).close()
    ctx = multiprocessing.get_context("spawn")
    out: multiprocessing.Queue[dict[str, list[str]]] = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(path, f"p{k}", out)) for k in range(2)]
    for p in procs:
        p.start()
    ids: dict[str, list[str]] = {}
    for _ in procs:
        ids.update(out.get(timeout=300))
    for p in procs:
        p.join(timeout=300)
        assert p.exitcode == 0
    with cpstore.open(path) as store:
        assert _check(store, ids) == 2 * _WRITERS * 20
