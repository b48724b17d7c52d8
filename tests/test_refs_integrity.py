"""Refs keep their promises: forward-only moves, audited resets, checked keys, no silent loss."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from pathlib import Path

import pytest

from cpstore.errors import ConflictError, IntegrityError, NotDescendantError, NotFoundError
from cpstore.native.canonical import decode_value, encode_value
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.model import STORE_VERSION
from cpstore.store.refs import REFS_DIGEST_KEY, SET, read_ref, unpack_ref, write_ref


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "s") as st:
        yield st


def _three(store: Store, run: str = "r") -> list[str]:
    rec = store.recorder(run)
    return [rec.checkpoint(i, {"i": i, "blob": bytes([i]) * 100}) for i in range(3)]


def _readable(store: Store, cid: str) -> bool:
    try:
        with store.read(cid) as cp:
            cp.state()
    except NotFoundError:
        return False
    return True


class TestForwardOnly:
    def test_moving_a_branch_to_a_non_descendant_is_refused(self, store: Store) -> None:
        """The issue's repro: set_ref back to ids[0] is refused and prune loses nothing."""
        ids = _three(store)
        with pytest.raises(NotDescendantError) as info:
            store.set_ref("r", "main", ids[0], expected_old=ids[2])
        assert isinstance(info.value, ConflictError)
        assert info.value.where == "refs/r/main"
        assert info.value.got == ids[0] and ids[2] in info.value.expected
        assert store.ref("r") == ids[2]
        assert store.prune(keep_last=100) == 0
        assert all(_readable(store, cid) for cid in ids)
        assert store.verify().ok
        assert list(store.audit_records()) == []

    def test_moving_a_branch_forward_to_a_fork_descendant_is_allowed(self, store: Store) -> None:
        """A fast-forward to a checkpoint recorded on another branch of the run is a plain set."""
        ids = _three(store)
        fork = store.recorder("r", branch="b", parent=ids[2])
        ahead = fork.checkpoint(3, {"i": 3})
        store.set_ref("r", "main", ahead, expected_old=ids[2])
        with store.latest("r") as cp:
            assert cp.id == ahead
        assert store.verify().ok

    def test_fast_forward_past_pruned_history_says_descent_cannot_be_proven(
        self, store: Store
    ) -> None:
        """A true descendant whose link to the head was pruned: refused, naming the pruned id."""
        rec = store.recorder("r")
        head = rec.checkpoint(1, b"a")
        fork = store.recorder("r", branch="f", parent=head)
        middle = fork.checkpoint(2, b"b")
        tip = fork.checkpoint(3, b"c")
        store.prune(keep_last=1)
        with pytest.raises(NotDescendantError) as info:
            store.set_ref("r", "main", tip, expected_old=head)
        message = str(info.value)
        assert "cannot be proven" in message and f"pruned at {middle}" in message
        assert "does not descend" not in message
        assert info.value.got == tip and head in info.value.expected
        assert store.ref("r") == head

    def test_deleting_a_branch_needs_the_audited_reset(self, store: Store) -> None:
        """set_ref(None) is refused: a deletion would drop the branch's history silently."""
        ids = _three(store)
        with pytest.raises(NotDescendantError):
            store.set_ref("r", "main", None, expected_old=ids[2])  # type: ignore[arg-type]
        assert store.ref("r") == ids[2]


class TestAuditedReset:
    def test_reset_is_audited_and_keeps_history_until_released(self, store: Store) -> None:
        """reset_ref writes an audit record; prune keeps the old history until released."""
        ids = _three(store)
        record = store.reset_ref(
            "r", "main", ids[0], expected_old=ids[2], operator="alice", reason="bad deploy"
        )
        assert record.kind == "ref_reset"
        assert record.body == {
            "run": "r",
            "branch": "main",
            "old": ids[2],
            "new": ids[0],
            "operator": "alice",
            "reason": "bad deploy",
        }
        assert store.ref("r") == ids[0]
        hold = {"run": "r", "branch": "main", "audit": record.digest}
        assert store.retained() == {ids[2]: {**hold, "holds": [hold]}}
        assert store.prune(keep_last=1) == 0
        assert all(_readable(store, cid) for cid in ids)
        assert store.verify().ok

        released = store.release_retained(ids[2], operator="bob", reason="checked")
        assert released.kind == "retained_release"
        assert released.body == {
            "checkpoint": ids[2],
            "holder": record.digest,
            "holders_left": [],
            "operator": "bob",
            "reason": "checked",
        }
        assert store.retained() == {}
        assert store.prune(keep_last=1) == 2
        assert [_readable(store, cid) for cid in ids] == [True, False, False]
        report = store.verify()
        assert report.ok, report.problems
        with pytest.raises(NotFoundError):
            store.release_retained(ids[2], operator="bob", reason="twice")

    def test_reset_with_a_stale_expected_head_changes_nothing(self, store: Store) -> None:
        """The reset is a CAS: a lost race writes no audit record and retains nothing."""
        ids = _three(store)
        with pytest.raises(ConflictError):
            store.reset_ref("r", "main", ids[0], expected_old=ids[1], operator="a", reason="b")
        assert store.ref("r") == ids[2]
        assert store.retained() == {}
        assert list(store.audit_records()) == []


def _reset_race(path: str, old: str, new: str, who: str) -> bool:
    with open_store(path) as st:
        try:
            st.reset_ref("r", "main", new, expected_old=old, operator=who, reason="race")
        except ConflictError:
            return False
        return True


class TestResetRace:
    def test_concurrent_resets_one_wins_and_one_audit_record(self, tmp_path: Path) -> None:
        """Four processes reset the same head at once: one wins, one record, history kept."""
        path = str(tmp_path / "s")
        with open_store(path) as st:
            ids = _three(st)
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(4) as pool:
            jobs = [(path, ids[2], ids[i % 2], f"op{i}") for i in range(4)]
            wins = pool.starmap(_reset_race, jobs)
        assert sum(wins) == 1
        with open_store(path) as st:
            assert len(list(st.audit_records(kind="ref_reset"))) == 1
            assert list(st.retained()) == [ids[2]]
            st.prune(keep_last=1)
            assert all(_readable(st, cid) for cid in ids)
            assert st.verify().ok


def _raw_put(store: Store, key: bytes, value: bytes | None, db: str = "refs") -> None:
    with store.backend.env.env.begin(write=True) as txn:
        if value is None:
            txn.delete(key, db=store.backend.db(db))
        else:
            txn.put(key, value, db=store.backend.db(db))


class TestCheckedRefs:
    def test_a_flipped_key_bit_naming_another_run_is_refused(self, store: Store) -> None:
        """run-3's ref renamed run-1 by one bit: latest, ref, history refuse; verify reports it."""
        _three(store, "run-3")
        with store.backend.env.env.begin() as txn:
            value = bytes(txn.get(b"run-3\0main", db=store.backend.db("refs")))
        _raw_put(store, b"run-3\0main", None)
        _raw_put(store, b"run-1\0main", value)  # '3' ^ 0x02 == '1'
        with pytest.raises(IntegrityError), store.latest("run-1"):
            pass
        with pytest.raises(IntegrityError):
            store.ref("run-1")
        with pytest.raises(IntegrityError):
            store.history("run-1")
        with pytest.raises(IntegrityError):
            store.recorder("run-1")
        with pytest.raises(IntegrityError):
            store.prune(keep_last=1)  # never sweep by a damaged head
        whats = [p.what for p in store.verify().problems]
        flipped = [w for w in whats if w.startswith("ref does not match its check")]
        # It names the ref the row is, one bit of its key away (review102).
        assert flipped and "passes the check under refs/run-3/main" in flipped[0], whats

    def test_a_ref_naming_another_run_is_refused_even_with_a_true_check(self, store: Store) -> None:
        """A ref whose check holds but whose target is another run's is an IntegrityError."""
        other = _three(store, "run-2")[2]
        with store.backend.env.env.begin(write=True) as txn:
            dbs, key = store.backend.env.dbs, b"run-1\0main"
            old = read_ref(txn, dbs, key, layout=2)
            write_ref(txn, dbs, key, bytes.fromhex(other), SET, old=old)
        with pytest.raises(IntegrityError), store.latest("run-1"):
            pass
        assert "ref names a checkpoint of another run or branch" in [
            p.what for p in store.verify().problems
        ]

    def test_a_vanished_ref_is_reported(self, store: Store) -> None:
        """A ref row deleted behind the store's back: verify says a ref vanished."""
        _three(store, "a")
        _three(store, "b")
        _raw_put(store, b"a\0main", None)
        problems = store.verify().problems
        vanished = "refs table does not match its digest: a ref vanished"
        assert [p.what for p in problems] == [vanished]
        assert problems[0].expected == "2 refs" and problems[0].got == "1 refs"

    def test_an_intact_store_with_forks_and_resets_verifies_clean(self, store: Store) -> None:
        """Recorded heads, forks, forward moves and resets all keep the refs digest true."""
        ids = _three(store)
        store.fork("r", "b", ids[1])
        store.recorder("r", branch="c", parent=ids[0]).checkpoint(9, {"x": 1})
        store.reset_ref("r", "main", ids[1], expected_old=ids[2], operator="o", reason="r")
        store.reset_ref("r", "b", None, expected_old=ids[1], operator="o", reason="r")
        store.delete_run("r")
        _three(store, "s")
        report = store.verify()
        assert report.ok, report.problems
        assert report.counts["refs"] == 1


def _make_v1(path: Path) -> list[str]:
    """A layout-1 store, built by hand: bare 16-byte ref values, no refs digest, version 1."""
    with open_store(path) as st:
        ids = _three(st)
        st.fork("r", "side", ids[0])
        with st.backend.env.env.begin(write=True) as txn:
            refs = st.backend.db("refs")
            for key, value in list(txn.cursor(db=refs)):
                txn.put(bytes(key), unpack_ref(bytes(key), bytes(value))[0], db=refs)
            txn.delete(REFS_DIGEST_KEY, db=st.backend.db("meta"))
            fmt = decode_value(txn.get(b"format", db=st.backend.db("meta")))
            fmt["version"] = 1
            txn.put(b"format", encode_value(fmt), db=st.backend.db("meta"))
    return ids


class TestLayoutUpgrade:
    def test_a_layout_1_store_reads_read_only_and_upgrades_on_a_writable_open(
        self, tmp_path: Path
    ) -> None:
        """Read-only: read as layout 1; writable: every ref gains its check in one txn."""
        path = tmp_path / "s"
        ids = _make_v1(path)
        with open_store(path, readonly=True) as ro:
            assert ro.backend.env.layout == 1
            with ro.latest("r") as cp:
                assert cp.id == ids[2]
            assert ro.branches("r") == {"main": ids[2], "side": ids[0]}
            assert ro.verify().ok
        with open_store(path) as st:
            assert st.backend.env.layout == STORE_VERSION
            with st.backend.env.env.begin() as txn:
                fmt = decode_value(txn.get(b"format", db=st.backend.db("meta")))
                main = unpack_ref(b"r\0main", txn.get(b"r\0main", db=st.backend.db("refs")))
                side = unpack_ref(b"r\0side", txn.get(b"r\0side", db=st.backend.db("refs")))
            assert fmt["version"] == STORE_VERSION
            assert main == (bytes.fromhex(ids[2]), 0)  # recorded on main
            assert side == (bytes.fromhex(ids[0]), 1)  # a fork pointer
            report = st.verify()
            assert report.ok, report.problems
            st.recorder("r").checkpoint(3, {"i": 3})
            assert st.verify().ok

    def test_a_layout_1_ref_naming_another_run_is_refused_read_only(self, tmp_path: Path) -> None:
        """Without a stored check, the target's run is still compared with the key."""
        path = tmp_path / "s"
        ids = _make_v1(path)
        with open_store(path) as st:
            pass  # upgraded; make it layout 1 again with a bad ref
        with open_store(path) as st, st.backend.env.env.begin(write=True) as txn:
            txn.put(b"q\0main", bytes.fromhex(ids[2]), db=st.backend.db("refs"))
            txn.delete(b"r\0main", db=st.backend.db("refs"))
            for key, value in list(txn.cursor(db=st.backend.db("refs"))):
                txn.put(bytes(key), bytes(value)[:16], db=st.backend.db("refs"))
            fmt = decode_value(txn.get(b"format", db=st.backend.db("meta")))
            fmt["version"] = 1
            txn.put(b"format", encode_value(fmt), db=st.backend.db("meta"))
        with open_store(path, readonly=True) as ro:
            with pytest.raises(IntegrityError), ro.latest("q"):
                pass
            with pytest.raises(IntegrityError):
                ro.ref("q")


class TestRetainedLineage:
    def test_a_retained_head_keeps_its_whole_lineage_past_a_kept_head(self, store: Store) -> None:
        """A head kept with keep_last=1 inside a retained lineage does not cut the lineage short."""
        ids = _three(store)
        store.reset_ref("r", "main", ids[1], expected_old=ids[2], operator="o", reason="r")
        assert store.prune(keep_last=1) == 0
        assert all(_readable(store, cid) for cid in ids)
        assert store.verify().ok


def _flip(store: Store, key: bytes, at: int) -> bytes:
    """Flip one bit of ref ``key``'s stored value at byte ``at``; return the damaged value."""
    with store.backend.env.env.begin() as txn:
        value = bytearray(txn.get(key, db=store.backend.db("refs")))
    value[at] ^= 1
    _raw_put(store, key, bytes(value))
    return bytes(value)


def _repair_race(path: str, new: str, who: str) -> bool:
    with open_store(path) as st:
        try:
            st.repair_ref("r", "main", new, operator=who, reason="race")
        except ConflictError:
            return False
        return True


class TestRefRepair:
    def test_a_damaged_ref_is_repaired_audited_and_retention_runs_again(self, store: Store) -> None:
        """Flip a bit, repair_ref: audited with the damaged bytes, then prune and verify work."""
        ids = _three(store)
        _three(store, "other")
        damaged = _flip(store, b"r\0main", 3)  # in the id: the damaged value names nothing
        with pytest.raises(IntegrityError):
            store.prune(keep_last=1)
        record = store.repair_ref("r", "main", ids[2], operator="ops", reason="bit flip")
        assert record.kind == "ref_repair"
        assert record.body["damaged"] == damaged.hex()
        assert record.body["new"] == ids[2] and record.body["retained"] is None
        assert store.verify().ok
        assert store.prune(keep_last=1) == 4
        assert store.ref("r") == ids[2] and _readable(store, ids[2])
        assert store.verify().ok

    def test_repair_retains_the_checkpoint_a_damaged_value_still_names(self, store: Store) -> None:
        """A flip in the check keeps the named head as a retained head; new=None drops the ref."""
        ids = _three(store)
        _flip(store, b"r\0main", 20)
        record = store.repair_ref("r", "main", None, operator="ops", reason="drop")
        assert record.body["retained"] == ids[2] and store.ref("r") is None
        assert list(store.retained()) == [ids[2]]
        assert store.prune(keep_last=1) == 0
        assert all(_readable(store, cid) for cid in ids)
        assert store.verify().ok

    def test_repairing_an_intact_ref_is_refused(self, store: Store) -> None:
        """repair_ref only replaces a ref whose check fails; an intact one is set_ref's."""
        ids = _three(store)
        with pytest.raises(ConflictError, match="passes its check"):
            store.repair_ref("r", "main", ids[0], operator="ops", reason="no")
        assert store.ref("r") == ids[2]
        assert list(store.audit_records()) == []

    def test_concurrent_repairs_one_wins_and_one_audit_record(self, tmp_path: Path) -> None:
        """Four processes repair the same damaged ref at once: one wins, one record."""
        path = str(tmp_path / "s")
        with open_store(path) as st:
            ids = _three(st)
            _flip(st, b"r\0main", 3)
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(4) as pool:
            wins = pool.starmap(_repair_race, [(path, ids[i % 3], f"op{i}") for i in range(4)])
        assert sum(wins) == 1
        with open_store(path) as st:
            assert len(list(st.audit_records(kind="ref_repair"))) == 1
            assert st.verify().ok
