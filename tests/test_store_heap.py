"""Store layout 5: the heap (appended entries) and its location indexes (content.py).

Layout-4 stores read and write on, upgraded lazily; read-only handles keep
reading across another process's upgrade; every damage to a location or a
heap entry is named by reads and by verify, never answered with other bytes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import lmdb
import pytest
from stored import damage, raw_dbs, seq_of, to_layout_4

import cpstore
from cpstore.cli import main
from cpstore.errors import FormatVersionError, IntegrityError, NotFoundError
from cpstore.store import lmdb_open
from cpstore.store.content import entry_header, objects_of, records_of
from cpstore.store.facade import Store
from cpstore.store.model import STORE_VERSION


def _record(st: Store, run: str, steps: int, start: int = 0) -> list[str]:
    rec = st.recorder(run)
    return [rec.checkpoint(i, {"a": f"{run} {i} " * 40, "b": i}) for i in range(start, steps)]


def _layout_4(path: Path, steps: int = 4) -> list[str]:
    with cpstore.open(path) as st:
        ids = _record(st, "old", steps)
    to_layout_4(path)
    return ids


def _entries(path: Path, table: str) -> int:
    with cpstore.open(path, readonly=True) as st, st.backend.read_txn() as txn:
        return int(txn.stat(st.backend.db(table))["entries"])


class TestLayout:
    def test_objects_and_records_go_to_the_heap_and_the_legacy_tables_stay_empty(
        self, tmp_path: Path
    ) -> None:
        """A new store writes heap entries under rising seqs, each named by its index."""
        with cpstore.open(tmp_path / "s") as st:
            ids = _record(st, "r", 3)
            with st.backend.read_txn() as txn:
                dbs = st.backend.dbs
                assert txn.stat(dbs["objects"])["entries"] == 0
                assert txn.stat(dbs["checkpoints"])["entries"] == 0
                seqs = [bytes(k) for k, _ in txn.cursor(db=dbs["heap"])]
                assert seqs == sorted(seqs) and len(seqs) == txn.stat(dbs["oloc"])["entries"] + 3
                loc = seq_of(txn, records_of(dbs), bytes.fromhex(ids[-1]))
                assert loc is not None and loc == seqs[-1]  # the record follows its objects
            assert st.verify().ok

    def test_a_seq_freed_by_gc_at_the_tail_is_taken_again_and_reads_stay_right(
        self, tmp_path: Path
    ) -> None:
        """gc deleting the last entries lets the next put reuse a seq: the kind-and-key compare
        keeps every read right."""
        with cpstore.open(tmp_path / "s") as st:
            keep = _record(st, "keep", 1)
            _record(st, "gone", 3)

            def seqs() -> set[bytes]:
                with st.backend.read_txn() as txn:
                    return {bytes(k) for k, _ in txn.cursor(db=st.backend.db("heap"))}

            before = seqs()
            st.gc(delete_run="gone")
            freed = before - seqs()
            assert freed and max(freed) == max(before)  # the tail went
            new = _record(st, "new", 2)
            assert freed & seqs()  # taken again
            for cid in keep + new:
                with st.read(cid) as cp:
                    assert isinstance(cp.state(), dict)
            assert st.verify().ok


class TestHints:
    def test_hints_naming_other_entries_only_send_the_read_to_the_index(
        self, tmp_path: Path
    ) -> None:
        """Every hint of a record pointed at another entry: state() and history_states()
        still return the right values (a hinted entry is used only once it hashes right)."""
        with cpstore.open(tmp_path / "s") as st:
            ids = _record(st, "r", 3)
            with st.read(ids[-1]) as cp:
                want = cp.state()
                parts = list(cp.manifest.raw["state"]["parts"].values())
            with st.backend.read_txn() as txn:  # the hints name the parts' entries, in order
                dbs = st.backend.dbs
                _, hints = records_of(dbs).hinted(txn, bytes.fromhex(ids[-1]))
                locs = [seq_of(txn, objects_of(dbs), bytes(k)) for k in parts]
                assert hints == b"".join((loc or b"")[4:] for loc in locs) and len(hints) == 8

            def mislead(txn: Any, dbs: Any) -> None:
                loc = bytes(txn.get(bytes.fromhex(ids[-1]), db=dbs["cloc"]))
                entry = bytearray(txn.get(loc, db=dbs["heap"]))
                count = int.from_bytes(entry[18:22], "big")
                assert count == 2  # the two state parts
                entry[22 : 22 + 4 * count] = (1).to_bytes(4, "big") * count
                txn.put(loc, bytes(entry), db=dbs["heap"])

            damage(st, mislead)
            with st.read(ids[-1]) as cp:
                assert cp.state() == want
            assert st.history_states("r", limit=1)[0].state == want
            assert st.verify().ok  # hints are never trusted, so never a problem


class TestUpgrade:
    def test_a_writable_open_upgrades_layout_4_and_leaves_old_entries_where_they_are(
        self, tmp_path: Path
    ) -> None:
        """Old entries stay in the legacy tables (read as a fallback); new ones go to the heap."""
        path = tmp_path / "s"
        old = _layout_4(path)
        legacy = _entries(path, "objects")
        with cpstore.open(path, readonly=True) as ro:
            assert ro.backend.layout == 4 and "heap" not in ro.backend.dbs
            with ro.read(old[-1]) as cp:
                assert cp.state_part("b") == 3
        with cpstore.open(path) as st:
            assert st.backend.layout == STORE_VERSION
            new = _record(st, "old", 7, start=4)
            for cid in old + new:
                with st.read(cid) as cp:
                    assert cp.state_part("a").startswith("old")
            assert st.verify().ok
        assert _entries(path, "objects") == legacy  # never grows again
        assert _entries(path, "heap") > 0

    def test_gc_after_an_upgrade_deletes_from_the_legacy_tables_and_the_heap(
        self, tmp_path: Path
    ) -> None:
        """A prune sweeps old checkpoints from the legacy table and new ones from the heap."""
        path = tmp_path / "s"
        _layout_4(path, steps=5)
        before = _entries(path, "checkpoints")
        with cpstore.open(path) as st:
            _record(st, "old", 9, start=5)
            head = st.ref("old")
            assert st.prune(keep_last=1) == 8
            assert st.verify().ok
            assert st.ref("old") == head
        assert _entries(path, "checkpoints") == 0 < before
        assert _entries(path, "cloc") == 1

    def test_a_read_only_handle_on_layout_4_reads_what_another_process_writes_after_upgrading(
        self, tmp_path: Path
    ) -> None:
        """A read-only handle opened at layout 4 adopts the heap tables once it sees layout 5."""
        path = tmp_path / "s"
        old = _layout_4(path)
        with cpstore.open(path, readonly=True) as ro:
            assert ro.backend.layout == 4
            assert ro.ref("old") == old[-1]
            write = (
                "import sys, cpstore\n"
                "with cpstore.open(sys.argv[1]) as st:\n"
                "    rec = st.recorder('old')\n"
                "    print(rec.checkpoint(9, {'a': 'old new ' * 40, 'b': 9}))\n"
            )
            out = subprocess.run(
                [sys.executable, "-c", write, str(path)],
                check=True,
                timeout=60,
                capture_output=True,
                text=True,
            )
            new = out.stdout.strip()
            assert ro.ref("old") == new
            with ro.latest("old") as cp:
                assert cp.id == new and cp.state_part("b") == 9
            with ro.read(old[0]) as cp:
                assert cp.state_part("b") == 0
            assert ro.backend.layout == STORE_VERSION and "heap" in ro.backend.dbs
            report = ro.verify()
            assert report.ok, report.problems
            assert [m.id for m in ro.history("old")][:2] == [new, old[-1]]

    def test_push_and_pull_between_layout_4_and_layout_5_stores_both_ways(
        self, tmp_path: Path
    ) -> None:
        """4 -> 5 (source read-only stays 4) and 5 -> 4 (the destination upgrades): both read."""
        four, five = tmp_path / "four", tmp_path / "five"
        old = _layout_4(four)
        with cpstore.open(five) as st:
            new = _record(st, "new", 3)
        assert main(["push", "--store", str(four), str(five)]) == 0
        with cpstore.open(four, readonly=True) as st:
            assert st.backend.layout == 4
        other = tmp_path / "other"
        old2 = _layout_4(other)
        assert main(["pull", "--store", str(other), str(five)]) == 0
        for where, ids in ((five, old + new), (other, old2 + new)):
            with cpstore.open(where, readonly=True) as st:
                assert st.backend.layout == STORE_VERSION
                report = st.verify()
                assert report.ok, report.problems
                for cid in ids:
                    with st.read(cid) as cp:
                        assert isinstance(cp.state_part("b"), int)

    def test_an_older_build_refuses_a_layout_5_store(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A build that reads layouts 1-4 opens a layout-5 store with FormatVersionError only."""
        with cpstore.open(tmp_path / "s") as st:
            _record(st, "r", 1)
        old = {k: v for k, v in lmdb_open._FORMAT_RECORDS.items() if v <= 4}
        monkeypatch.setattr(lmdb_open, "READABLE_VERSIONS", (1, 2, 3, 4))
        monkeypatch.setattr(lmdb_open, "_FORMAT_RECORDS", old)
        for readonly in (True, False):
            with pytest.raises(FormatVersionError):
                cpstore.open(tmp_path / "s", readonly=readonly).close()


def _problems(st: Store) -> list[str]:
    report = st.verify()
    assert not report.ok
    return [f"{p.what} @ {p.where}" for p in report.problems]


class TestDamage:
    def _one(self, tmp_path: Path) -> tuple[Store, bytes, bytes]:
        st = cpstore.open(tmp_path / "s")
        key = st.put_object(b"the object " * 30)
        other = st.put_object(b"another object " * 30)
        return st, bytes(key), bytes(other)

    def test_a_damaged_location_index_entry_is_named_by_reads_and_verify(
        self, tmp_path: Path
    ) -> None:
        """An oloc value that is not 8 bytes: IntegrityError naming oloc, with verify=False too."""
        st, key, _ = self._one(tmp_path)
        with st:
            damage(st, lambda txn, dbs: txn.put(key, b"\x01\x02", db=dbs["oloc"]))
            for verify in (True, False):
                with pytest.raises(IntegrityError, match="8-byte location") as info:
                    st.get_object(key, verify=verify)
                assert f"oloc/{key.hex()}" in str(info.value.where)
            assert any(f"oloc/{key.hex()}" in p for p in _problems(st))

    def test_a_location_naming_another_entry_never_hands_out_its_bytes(
        self, tmp_path: Path
    ) -> None:
        """An index row pointing at another object's entry fails the kind-and-key compare."""
        st, key, other = self._one(tmp_path)
        with st:

            def swap(txn: Any, dbs: Any) -> None:
                txn.put(key, bytes(txn.get(other, db=dbs["oloc"])), db=dbs["oloc"])

            damage(st, swap)
            for verify in (True, False):
                with pytest.raises(IntegrityError, match="not the one the index names"):
                    st.get_object(key, verify=verify)
            assert st.get_object(other) == b"another object " * 30
            problems = _problems(st)
            assert any(f"oloc/{key.hex()}" in p for p in problems)
            assert any("no location index names" in p for p in problems)  # key's own entry

    def test_a_location_naming_a_missing_heap_entry_is_named(self, tmp_path: Path) -> None:
        """An index row whose heap entry is gone: IntegrityError, and verify names it."""
        st, key, _ = self._one(tmp_path)
        with st:

            def drop(txn: Any, dbs: Any) -> None:
                txn.delete(bytes(txn.get(key, db=dbs["oloc"])), db=dbs["heap"])

            damage(st, drop)
            with pytest.raises(IntegrityError, match="not stored"):
                st.get_object(key, verify=False)
            assert any(f"oloc/{key.hex()}" in p for p in _problems(st))

    def test_a_heap_entry_no_index_names_is_reported_as_garbage(self, tmp_path: Path) -> None:
        """An entry whose index row is gone: the object is not found, verify names the entry."""
        st, key, _ = self._one(tmp_path)
        with st:
            damage(st, lambda txn, dbs: txn.delete(key, db=dbs["oloc"]))
            with pytest.raises(NotFoundError):
                st.get_object(key)
            assert any("no location index names" in p and "heap/" in p for p in _problems(st))

    @pytest.mark.parametrize("cut", [1, 10, 20])
    def test_a_truncated_heap_entry_is_never_read_as_the_object(
        self, tmp_path: Path, cut: int
    ) -> None:
        """A heap entry cut short (in its header or its bytes): reads raise, verify names it."""
        st, key, _ = self._one(tmp_path)
        with st:

            def truncate(txn: Any, dbs: Any) -> None:
                seq = bytes(txn.get(key, db=dbs["oloc"]))
                txn.put(seq, bytes(txn.get(seq, db=dbs["heap"]))[:cut], db=dbs["heap"])

            damage(st, truncate)
            with pytest.raises(IntegrityError):
                st.get_object(key)
            assert any(key.hex() in p for p in _problems(st))

    def test_a_checkpoint_record_location_swapped_with_another_is_refused(
        self, tmp_path: Path
    ) -> None:
        """cloc rows are checked like oloc rows: a read of the checkpoint names the location."""
        with cpstore.open(tmp_path / "s") as st:
            a, b = _record(st, "r", 2)

            def swap(txn: Any, dbs: Any) -> None:
                loc = bytes(txn.get(bytes.fromhex(b), db=dbs["cloc"]))
                txn.put(bytes.fromhex(a), loc, db=dbs["cloc"])

            damage(st, swap)
            with pytest.raises(IntegrityError, match="not the one the index names"):
                st.read(a, verify=False).__enter__()
            assert any(f"cloc/{a}" in p for p in _problems(st))

    def test_raw_heap_entries_carry_their_kind_and_key(self, tmp_path: Path) -> None:
        """Every heap entry starts with its kind byte, key length and key (self-describing)."""
        path = tmp_path / "s"
        with cpstore.open(path) as st:
            key = st.put_object(b"abc")
            cid = _record(st, "r", 1)[0]
        env = lmdb.open(str(path), max_dbs=32, readonly=True, lock=False)
        try:
            dbs = raw_dbs(env)
            with env.begin() as txn:
                entries = {bytes(v)[:18] for _, v in txn.cursor(db=dbs["heap"])}
                assert entry_header(0x6F, key) in entries
                assert entry_header(0x72, bytes.fromhex(cid)) in entries  # layout 6: compact
                assert objects_of(dbs).exists(txn, key)
        finally:
            env.close()
