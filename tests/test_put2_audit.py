"""Audit of the put-path speed-ups (branch put2): each cheaper form is attacked where it
could answer differently from the form it replaced, and where concurrency (fork, another
process growing the map, another process moving the ref) could make it stale.

What ``Content.locations`` puts in ``found`` stands in for the commit's must-exist
reads, so every attack compares it with :meth:`Content.stored` key by key, and the
end-to-end ones check that a checkpoint naming an object no read can serve is refused.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import time
from pathlib import Path
from typing import Any

import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stored import damage
from test_store_concurrency import child_raises

import cpstore
from cpstore.errors import ConflictError, IntegrityError
from cpstore.store import compact_store
from cpstore.store.content import KIND_COMPACT, KIND_OBJECT, KIND_RECORD, Content, objects_of
from cpstore.store.facade import Store

_PARTS = 10


def _parts_store(path: Path, *, durability: str = "sync") -> tuple[Store, list[bytes], str]:
    """A store whose head names 10 parts; (store, the head's part digests, head id)."""
    store = cpstore.open(path, durability=durability)  # type: ignore[arg-type]
    rec = store.recorder("r")
    state = {f"p{i}": f"value {i} " * 30 for i in range(_PARTS)}
    cid = ""
    for step in range(12):
        state[f"p{step % _PARTS}"] = f"step {step} " * 30
        cid = rec.checkpoint(step, dict(state))
    rec.close()
    with store.read(cid) as view:
        parts = view.manifest.raw["state"]["parts"]
    return store, [bytes(d) for d in parts.values()], cid


def _stored(objects: Content, txn: Any, key: bytes) -> bool:
    """The must-exist answer the commit would give without ``found`` (damage: False)."""
    try:
        return objects.stored(txn, key)
    except IntegrityError:
        return False


def _compare(store: Store, keys: list[bytes]) -> set[bytes]:
    """locations(found) against the per-key reads in one write txn; returns ``found``."""
    objects = objects_of(store.backend.dbs)
    txn = store.backend.env.env.begin(write=True, buffers=True)
    try:
        found: set[bytes] = set()
        got = objects.locations(txn, keys, found)
        want = objects.locations(txn, keys)  # no found: the per-key loop
        stored = {k for k in keys if _stored(objects, txn, k) and txn.get(k, None, objects.index)}
    finally:
        txn.abort()
    assert got == want
    assert found == stored
    return found


_DAMAGES = [
    "entry shorter than its header",
    "entry of a compact record carrying the key",
    "entry of a record carrying the key",
    "entry with another key length byte",
    "row names a checkpoint record's entry",
    "row names the entry after its own",
    "row of 8 zero bytes",
    "entry emptied",
]


def _damage(txn: Any, dbs: Any, victim: bytes, how: str, cid: bytes) -> None:
    oloc, cloc, heap = dbs["oloc"], dbs["cloc"], dbs["heap"]
    seq = bytes(txn.get(victim, db=oloc))
    entry = bytes(txn.get(seq, db=heap))
    if how == "entry shorter than its header":
        txn.put(seq, entry[:17], db=heap)
    elif how == "entry of a compact record carrying the key":
        txn.put(seq, bytes((KIND_COMPACT,)) + entry[1:], db=heap)
    elif how == "entry of a record carrying the key":
        txn.put(seq, bytes((KIND_RECORD,)) + entry[1:], db=heap)
    elif how == "entry with another key length byte":
        txn.put(seq, bytes((KIND_OBJECT, 15)) + entry[2:], db=heap)
    elif how == "row names a checkpoint record's entry":
        txn.put(victim, bytes(txn.get(cid, db=cloc)), db=oloc)
    elif how == "row names the entry after its own":
        txn.put(victim, (int.from_bytes(seq, "big") + 1).to_bytes(8, "big"), db=oloc)
    elif how == "row of 8 zero bytes":
        txn.put(victim, bytes(8), db=oloc)
    else:
        txn.put(seq, b"", db=heap)


@pytest.mark.parametrize("how", _DAMAGES)
def test_locations_never_finds_a_key_whose_location_another_damage_breaks(
    tmp_path: Path, how: str
) -> None:
    """Damages the put2 tests leave out (an entry shorter than its header, a record's
    ``c``/``r`` entry carrying the object's key, another key-length byte, a row naming a
    record's entry): ``found`` equals the per-key must-exist answers, the victim not in it."""
    store, keys, head = _parts_store(tmp_path / "s")
    with store:
        victim = keys[4]
        damage(store, lambda txn, dbs: _damage(txn, dbs, victim, how, bytes.fromhex(head)))
        found = _compare(store, keys)
        assert victim not in found
        assert found == set(keys) - {victim}


def test_locations_of_duplicated_permuted_prefix_and_absent_keys_equal_per_key(
    tmp_path: Path,
) -> None:
    """Duplicated keys, a permutation, a key that is another's 15-byte prefix, an absent
    16-byte key: the same hints and ``found`` as the per-key reads."""
    store, keys, _ = _parts_store(tmp_path / "s")
    with store:
        assert _compare(store, keys + keys) == set(keys)
        assert _compare(store, [keys[0]] * 5) == {keys[0]}
        shuffled = keys[:]
        random.Random(7).shuffle(shuffled)
        assert _compare(store, shuffled) == set(keys)
        assert _compare(store, [*keys, keys[2][:15]]) == set(keys)
        absent = bytes(16)
        assert _compare(store, [*keys, absent]) == set(keys)
        assert _compare(store, [absent, *keys]) == set(keys)


@settings(max_examples=25, deadline=None)
@given(
    picks=st.lists(
        st.tuples(st.integers(0, _PARTS - 1), st.sampled_from(_DAMAGES)),
        min_size=1,
        max_size=4,
        unique_by=lambda p: p[0],
    ),
    dup=st.booleans(),
)
def test_locations_with_several_damages_at_once_equal_per_key(
    tmp_path_factory: pytest.TempPathFactory, picks: list[tuple[int, str]], dup: bool
) -> None:
    """Several damaged locations among ten (and the keys repeated): ``found`` is exactly
    the keys whose location checks, never a damaged one."""
    store, keys, head = _parts_store(tmp_path_factory.mktemp("s") / "s")
    with store:

        def hurt(txn: Any, dbs: Any) -> None:
            for i, how in picks:
                _damage(txn, dbs, keys[i], how, bytes.fromhex(head))

        damage(store, hurt)
        found = _compare(store, keys + keys if dup else keys)
        assert not found & {keys[i] for i, _ in picks}


@pytest.mark.parametrize("how", ["row names another part's entry", *_DAMAGES])
def test_a_commit_naming_an_unchanged_part_whose_location_is_damaged_is_refused(
    tmp_path: Path, how: str
) -> None:
    """End to end: a recorder's next checkpoint names an unchanged part (a must-exist key
    answered by locations' ``found``) whose location is damaged: IntegrityError, the branch
    does not move."""
    store, keys, head = _parts_store(tmp_path / "s")
    with store:
        rec = store.recorder("r")
        state = {f"p{i}": f"step {i + 2} " * 30 for i in range(_PARTS)}
        state["p0"] = "step 10 " * 30
        state["p1"] = "step 11 " * 30
        victim = keys[5]

        def hurt(txn: Any, dbs: Any) -> None:
            if how == "row names another part's entry":
                oloc = dbs["oloc"]
                txn.put(victim, bytes(txn.get(keys[6], db=oloc)), db=oloc)
            else:
                _damage(txn, dbs, victim, how, bytes.fromhex(head))

        damage(store, hurt)
        state["p9"] = "a new value " * 30  # one new object: the rest are must-exist keys
        with pytest.raises(IntegrityError):
            rec.checkpoint(20, state)
        assert store.ref("r") == head


@pytest.mark.parametrize("durability", ["sync", "none", "batched"])
def test_a_forked_child_cannot_commit_through_its_parents_store(
    tmp_path: Path, durability: str
) -> None:
    """put2 leaves one pid check per commit (env.write's in ``none``): a forked child's
    checkpoint (and its flush) gets ForkError in every durability; the parent's branch
    and data stay as they were."""
    store, _, head = _parts_store(tmp_path / "s", durability=durability)
    with store:
        store.flush()
        head = store.ref("r") or head
        rec = store.recorder("r")

        def child() -> None:
            rec.checkpoint(30, {"p0": "child"})
            rec.flush()

        assert child_raises(child)
        assert store.ref("r") == head
        cid = rec.checkpoint(31, {"p0": "parent"})
        rec.flush()
        assert store.ref("r") == cid
        assert store.verify().ok


def _grow(path: str, rounds: int, ready: Any, go: Any) -> int:
    """Grow the map by writing big objects; returns how often it grew."""
    with cpstore.open(path, map_size=1 << 20) as store:
        ready.set()
        go.wait(60)
        grown, last = 0, store.backend.env.env.info()["map_size"]
        for i in range(rounds):
            store.put_object(os.urandom(64) + bytes(192 * 1024) + i.to_bytes(8, "little"))
            size = store.backend.env.env.info()["map_size"]
            grown += size != last
            last = size
        return grown


@pytest.mark.parametrize("durability", ["sync", "none"])
def test_commits_on_a_held_handle_while_another_process_grows_the_map_all_land(
    tmp_path: Path, durability: str
) -> None:
    """_begin_write tries LMDB's begin first: a writer held open while another process
    grows the map (MDB_MAP_RESIZED on its next begin) acknowledges only checkpoints a
    fresh open reads back, and the store verifies."""
    path = str(tmp_path / "s")
    with cpstore.open(path, map_size=1 << 20):
        pass
    ctx = multiprocessing.get_context("spawn")
    manager = ctx.Manager()
    ready, go = manager.Event(), manager.Event()
    acked: list[str] = []
    with cpstore.open(path, map_size=1 << 20, durability=durability) as store:  # type: ignore[arg-type]
        rec = store.recorder("w")
        with ctx.Pool(1) as pool:
            grower = pool.apply_async(_grow, (path, 60, ready, go))
            assert ready.wait(60)
            go.set()
            step = 0
            while not grower.ready():
                acked.append(rec.checkpoint(step, {"a": f"v{step}" * 50, "b": step}))
                step += 1
            grown = grower.get(60)
        store.flush()
    assert grown >= 2, "the map never grew: the test proves nothing"
    assert len(acked) >= 2
    with cpstore.open(path, readonly=True) as again:
        assert [m.id for m in again.history("w")] == acked[::-1]
        for step in range(max(0, len(acked) - 3), len(acked)):
            with again.read(acked[step]) as view:
                assert view.state() == {"a": f"v{step}" * 50, "b": step}
        report = again.verify()
        assert report.ok, report.problems


def _reset_ref(path: str, expected: str, to: str) -> None:
    with cpstore.open(path) as store:
        store.reset_ref("r", "main", to, expected_old=expected, operator="t", reason="audit")


def test_a_ref_another_process_rewrote_is_checked_before_the_next_commit(
    tmp_path: Path,
) -> None:
    """The ref memo (_WRITTEN) is a pure function of (key, bytes): another process that
    resets the branch to the same checkpoint (other bytes: origin SET) or moves it leaves
    this recorder's next checkpoint either refused as a moved branch or committed with
    the refs digest still matching (verify clean)."""
    path = str(tmp_path / "s")
    store = cpstore.open(path)
    with store:
        rec = store.recorder("r")
        first = rec.checkpoint(0, {"a": 1})
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(1) as pool:
            pool.apply(_reset_ref, (path, first, first))
        # Same checkpoint, origin SET: other bytes; the head did not move, so the
        # compare-and-set holds and the digest must take out the SET ref's hash.
        second = rec.checkpoint(1, {"a": 2})
        assert store.ref("r") == second
        report = store.verify()
        assert report.ok, report.problems
        with ctx.Pool(1) as pool:
            pool.apply(_reset_ref, (path, second, first))
        with pytest.raises(ConflictError):
            rec.checkpoint(2, {"a": 3})
        assert store.verify().ok


def test_an_entry_really_stored_past_seq_2_32_is_found_with_a_zero_hint(tmp_path: Path) -> None:
    """A sound entry at a seq the 4-byte hint cannot hold: the concatenated form declines,
    the per-key reads find it (as stored() does) and hint 0 for it."""
    store, keys, _ = _parts_store(tmp_path / "s")
    with store:
        victim = keys[2]
        far = (2**32 + 5).to_bytes(8, "big")

        def move(txn: Any, dbs: Any) -> None:
            oloc, heap = dbs["oloc"], dbs["heap"]
            seq = bytes(txn.get(victim, db=oloc))
            txn.put(far, bytes(txn.get(seq, db=heap)), db=heap)
            txn.delete(seq, db=heap)
            txn.put(victim, far, db=oloc)

        damage(store, move)
        assert _compare(store, keys) == set(keys)
        objects = objects_of(store.backend.dbs)
        with store.backend.read_txn() as txn:
            hints = objects.locations(txn, keys, set())
        assert hints[4 + 4 * 2 : 4 + 4 * 3] == bytes(4)


def _alternate(path: str, rounds: int, tag: str) -> int:
    """Checkpoint ``rounds`` times on run r/main beside another process; a moved branch
    re-reads the head. Returns the commits that landed."""
    landed = 0
    with cpstore.open(path) as store:
        rec = store.recorder("r")
        for i in range(rounds):
            try:
                # A system-wide clock: never below a step the other process wrote.
                rec.checkpoint(time.monotonic_ns(), {"who": tag, "i": i})
                landed += 1
            except ConflictError:
                rec.close()
                rec = store.recorder("r")
        rec.close()
    return landed


def test_two_processes_moving_one_branch_keep_the_refs_digest_whole(tmp_path: Path) -> None:
    """Two processes take turns moving the same ref (each one's _WRITTEN memo goes stale
    whenever the other commits): every acknowledged move is in the history and the refs
    table digest verifies."""
    path = str(tmp_path / "s")
    with cpstore.open(path) as store:
        store.recorder("r").checkpoint(0, {"who": "init"})
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        results = pool.starmap(_alternate, [(path, 60, "a"), (path, 60, "b")])
    with cpstore.open(path, readonly=True) as again:
        assert all(results), "a process never committed: the test proves nothing"
        assert len(again.history("r")) == 1 + sum(results)
        report = again.verify()
        assert report.ok, report.problems


#: Per key: how its location is built; "sound" dominates so that most examples reach the
#: concatenated compare with zero or one damaged piece among sound ones.
_ROW_HOW = ["sound"] * 12 + [
    "no row",
    "7-byte row",
    "9-byte row",
    "row past 2**32",
    "row 2**32 - 1",
    "shared row",
    "no entry",
    "kind c",
    "kind r",
    "key length 15",
    "key length 17",
    "other key",
    "cut short",
    "header only",
    "empty entry",
]


@settings(max_examples=200, deadline=None)
@given(
    keys=st.lists(
        st.one_of(*[st.binary(min_size=16, max_size=16)] * 6, st.binary(min_size=15, max_size=17)),
        min_size=1,
        max_size=8,
    ),
    hows=st.lists(st.sampled_from(_ROW_HOW), min_size=8, max_size=8),
    tails=st.lists(st.binary(max_size=3), min_size=8, max_size=8),
)
def test_locations_found_equals_stored_on_random_tables(
    tmp_path_factory: pytest.TempPathFactory,
    keys: list[bytes],
    hows: list[str],
    tails: list[bytes],
) -> None:
    """A differential fuzz on bare tables (keys of 15-17 bytes, repeated; per key a sound
    location or one of 14 damages, several at once): ``found`` is exactly the keys
    :meth:`Content.stored` reaches through the index, and the hint block equals the
    per-key loop's."""
    path = str(tmp_path_factory.mktemp("t"))
    env = lmdb.open(path, max_dbs=4, map_size=1 << 24)
    try:
        dbs = {name: env.open_db(name.encode()) for name in ("heap", "oloc", "objects")}
        unique = list(dict.fromkeys(keys))
        with env.begin(write=True) as txn:
            for i, key in enumerate(unique):
                how, tail = hows[i], tails[i]
                seq = (i + 1).to_bytes(8, "big")
                entry = bytes((KIND_OBJECT, len(key))) + key + tail
                row: bytes | None = seq
                if how == "no row":
                    row = None
                elif how == "7-byte row":
                    row = seq[1:]
                elif how == "9-byte row":
                    row = b"\x00" + seq
                elif how == "row past 2**32":
                    row = (2**32 + i).to_bytes(8, "big")
                elif how == "row 2**32 - 1":
                    row = (2**32 - 1 - i).to_bytes(8, "big")
                elif how == "shared row":
                    row = (1).to_bytes(8, "big")  # the first key's entry
                elif how == "kind c":
                    entry = bytes((KIND_RECORD,)) + entry[1:]
                elif how == "kind r":
                    entry = bytes((KIND_COMPACT,)) + entry[1:]
                elif how == "key length 15":
                    entry = bytes((KIND_OBJECT, 15)) + entry[2:]
                elif how == "key length 17":
                    entry = bytes((KIND_OBJECT, 17)) + entry[2:]
                elif how == "other key":
                    other = unique[(i + 1) % len(unique)]
                    entry = bytes((KIND_OBJECT, len(other))) + other + tail
                elif how == "cut short":
                    entry = entry[: len(key) + 1]
                elif how == "header only":
                    entry = entry[: len(key) + 2]
                elif how == "empty entry":
                    entry = b""
                if row is None:
                    continue
                txn.put(key, row, db=dbs["oloc"])
                if how not in {"no entry", "shared row"}:
                    txn.put(row if len(row) == 8 else seq, entry, db=dbs["heap"])
        objects = Content(dbs, KIND_OBJECT)
        txn = env.begin(write=True, buffers=True)  # the commit's kind of txn
        try:
            found: set[bytes] = set()
            got = objects.locations(txn, keys, found)
            want = objects.locations(txn, keys)
            stored = {k for k in keys if txn.get(k, None, dbs["oloc"]) and _stored(objects, txn, k)}
        finally:
            txn.abort()
        assert got == want
        assert found == stored
    finally:
        env.close()


def test_commits_after_gc_and_compact_in_one_process_name_only_readable_objects(
    tmp_path: Path,
) -> None:
    """The backend's Content handles and the process-wide ref memo and append slot outlive
    a gc (the heap tail deleted, its seqs reused) and a close/compact/reopen: the next
    checkpoints read back whole, part by part, and the store verifies."""
    path = tmp_path / "s"
    store, _, _ = _parts_store(path)
    with store:
        rec = store.recorder("r")
        state = {f"p{i}": f"kept {i} " * 30 for i in range(_PARTS)}
        rec.checkpoint(50, state)
        swept = store.gc(keep_last=1)
        state["p0"] = "after gc " * 30
        after_gc = rec.checkpoint(51, dict(state))
        assert swept.objects_removed > 0, "gc swept nothing: the test proves nothing"
        rec.close()
    compact_store(path)
    with cpstore.open(path) as again:
        rec = again.recorder("r")
        state["p1"] = "after compact " * 30
        after_compact = rec.checkpoint(52, dict(state))
        rec.close()
        for cid in (after_gc, after_compact):
            with again.read(cid) as view:
                got = view.state()
            assert got == (state if cid == after_compact else {**state, "p1": "kept 1 " * 30})
        report = again.verify()
        assert report.ok, report.problems


@pytest.mark.parametrize("durability", ["sync", "none"])
def test_threads_moving_refs_in_two_stores_keep_every_refs_digest_whole(
    tmp_path: Path, durability: str
) -> None:
    """Four threads, two stores in one process, the same run and branch names in both (one
    ref key, one process-wide _WRITTEN slot swapped between them): every acknowledged
    checkpoint is its branch's history and both stores verify."""
    stores = [
        cpstore.open(tmp_path / name, durability=durability)  # type: ignore[arg-type]
        for name in ("a", "b")
    ]
    acked: dict[tuple[int, str], list[str]] = {}
    errors: list[BaseException] = []

    def work(i: int, branch: str) -> None:
        try:
            rec = stores[i].recorder("r", branch=branch)
            ids = acked.setdefault((i, branch), [])
            for step in range(40):
                ids.append(rec.checkpoint(step, {"s": step, "b": branch, "p": "x" * 300}))
            rec.close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i, b)) for i in (0, 1) for b in ("main", "side")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        for (i, branch), ids in acked.items():
            assert [m.id for m in stores[i].history("r", branch)] == ids[::-1]
        for s in stores:
            report = s.verify()
            assert report.ok, report.problems
    finally:
        for s in stores:
            s.close()


def test_a_part_kept_in_the_legacy_table_is_committed_with_a_zero_hint_and_read_back(
    tmp_path: Path,
) -> None:
    """A part stored before the heap (legacy ``objects`` table, no index row) among indexed
    ones: the concatenated form declines, the must-exist read finds it in the legacy
    table, the checkpoint commits and its state reads back hash-checked."""
    store, keys, _ = _parts_store(tmp_path / "s")
    with store:
        victim = keys[3]

        def to_legacy(txn: Any, dbs: Any) -> None:
            seq = bytes(txn.get(victim, db=dbs["oloc"]))
            entry = bytes(txn.get(seq, db=dbs["heap"]))
            txn.put(victim, entry[18:], db=dbs["objects"])
            txn.delete(seq, db=dbs["heap"])
            txn.delete(victim, db=dbs["oloc"])

        damage(store, to_legacy)
        assert _compare(store, keys) == set(keys) - {victim}
        rec = store.recorder("r")
        with store.read(store.ref("r") or "") as view:
            got = view.state()
        assert isinstance(got, dict)
        state = dict(got)
        state["p0"] = "one new part " * 20
        cid = rec.checkpoint(40, state)
        rec.close()
        with store.read(cid) as view:
            assert view.state() == state
        report = store.verify()
        assert report.ok, report.problems
