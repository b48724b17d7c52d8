"""Root v2 (store layout 4): level 1's tail in the root, the upper levels' tails in one object."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import lmdb
import msgpack
import pytest
from stored import edit_raw, raw_get

import cpstore
from cpstore.errors import FormatVersionError, IntegrityError
from cpstore.native.binding import digest
from cpstore.native.canonical import decode_value, encode_value
from cpstore.store import append_state, chunk_tree, lmdb_open
from cpstore.store.chunk_tree import (
    MAX_LEVEL,
    ROOT_VERSION,
    build_tree,
    load_tree,
    read_root,
    read_upper,
)
from cpstore.store.content import objects_of
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store
from cpstore.store.model import STORE_VERSION
from cpstore.store.stats import store_stats

WORDS = ("the", "planner", "asked", "search", "tool", "for", "weather", "and", "then", "a")


def _history(n: int) -> list[dict[str, str]]:
    def text(seed: int) -> str:
        rng = random.Random(seed)
        return " ".join(rng.choice(WORDS) for _ in range(180))[:900]

    return [{"role": "user", "content": f"{i}: " + text(i)} for i in range(n)]


def _pack_root_v1(head: bytes, size: int, spine: list[bytes], out: dict[bytes, bytes]) -> bytes:
    """What layout-3 recorders wrote: every level's tail inline in a map."""
    root: bytes = msgpack.packb({"head": head, "size": size, "spine": spine}, use_bin_type=True)
    out[digest(root)] = root
    return digest(root)


def _root(st: Store, cid: str, name: str = "h") -> bytes:
    with st.backend.read_txn() as txn:
        m = st.backend.load_manifest(txn, bytes.fromhex(cid), verify=True)
        return bytes(m.raw["state"]["chunked"][name])


def _get(st: Store, key: bytes) -> bytes | None:
    with st.backend.read_txn() as txn:
        return raw_get(txn, st.backend.dbs, "objects", key)


def _edit(path: Path, key: bytes, value: bytes | None) -> None:
    edit_raw(path, "objects", key, lambda _old: value)


def _set_version(path: Path, version: int) -> None:
    env = lmdb.open(str(path), max_dbs=16)
    with env.begin(write=True) as txn:
        fmt = {"layout": "cpstore", "version": version, "digest": "xxh3-128"}
        txn.put(b"format", encode_value(fmt), db=env.open_db(b"meta", txn=txn))
    env.close()


def _upper_of(st: Store, cid: str) -> bytes:
    upper = read_root(_get(st, _root(st, cid)) or b"", "test")[3]
    assert upper is not None
    return upper


class TestShape:
    def test_a_multi_level_tree_has_a_small_root_and_an_upper_spine(self) -> None:
        """The root is [2, head, size, tail1, upper]; the upper spine lists levels 2 and up."""
        tree = build_tree(encode_value(_history(300)), canonical=True)
        value = decode_value(tree.nodes[tree.root])
        assert value[0] == ROOT_VERSION and len(value) == 5
        upper = read_root(tree.nodes[tree.root], "t")[3]
        assert upper is not None and digest(tree.nodes[upper]) == upper
        levels = read_upper(tree.nodes[upper], "t")
        assert len(levels) >= 2  # 300 chunks, 1 in 4 ends a node: at least 3 levels
        assert len(tree.nodes[tree.root]) < 34 + 16 * 64

    def test_a_one_level_tree_names_no_upper_spine(self) -> None:
        """No complete node: the root's upper is empty and the root is the only node stored."""
        one_level = 0
        for seed in range(40):
            tree = build_tree(random.Random(seed).randbytes(6000), canonical=False)
            root = decode_value(tree.nodes[tree.root])
            assert (root[4] == b"") == (len(tree.nodes) == 1)
            one_level += root[4] == b""
        assert 0 < one_level < 40  # a chunk or two: most end no node, some do

    def test_the_upper_spine_changes_only_when_a_level_1_node_completes(self) -> None:
        """Appending one message at a time: a new upper spine exactly when level 1 gains a node."""
        changed = 0
        before: tuple[bytes | None, frozenset[bytes]] | None = None
        for n in range(200, 260):
            tree = build_tree(encode_value(_history(n)), canonical=True)
            upper = read_root(tree.nodes[tree.root], "t")[3]
            level1 = frozenset(
                k for k, v in tree.nodes.items() if k not in (tree.root, upper) and v[1] == 1
            )
            if before is not None:
                assert (upper != before[0]) == (level1 != before[1])
                changed += upper != before[0]
            before = (upper, level1)
        assert 0 < changed < 40  # most appends reuse the upper spine

    @pytest.mark.parametrize(
        "root",
        [
            [3, b"", 10, b"", b""],  # unknown root version
            [2, b"", 10, b"x" * 15, b""],  # tail not whole digests
            [2, b"", 10, b"", b"y" * 5],  # upper neither empty nor a digest
            [2, b"", -1, b"", b""],  # negative size
            [2, b"", 10, b""],  # missing entry
            [2.0, b"", 10, b"", b""],  # version not an int (equal to 2 in Python)
        ],
        ids=["version", "tail", "upper", "size", "short", "float-version"],
    )
    def test_a_malformed_root_v2_is_an_integrity_error(self, root: list[Any]) -> None:
        """read_root refuses a v2 root of the wrong shape, naming where."""
        with pytest.raises(IntegrityError, match="malformed") as info:
            read_root(msgpack.packb(root, use_bin_type=True), "state.h")
        assert "state.h" in str(info.value.where)

    @pytest.mark.parametrize(
        "upper",
        [[], [b"x" * 17], [b""] * MAX_LEVEL, {"a": b""}, [1]],
        ids=["empty", "not-digests", "too-deep", "map", "int"],
    )
    def test_a_malformed_upper_spine_is_an_integrity_error(self, upper: Any) -> None:
        """read_upper refuses anything but 1 to MAX_LEVEL - 1 tails of whole digests."""
        with pytest.raises(IntegrityError, match="malformed"):
            read_upper(msgpack.packb(upper, use_bin_type=True), "state.h (upper spine)")


class TestDamage:
    @pytest.mark.parametrize("damage", ["flip", "delete", "malformed"])
    def test_a_damaged_or_missing_upper_spine_fails_the_read_naming_it(
        self, tmp_path: Path, damage: str
    ) -> None:
        """Read raises IntegrityError naming the upper spine; verify reports it; nothing crashes."""
        path = tmp_path / "s"
        with open_store(path) as st:
            cid = st.recorder("r").checkpoint(1, {"h": _history(120)})
            upper = _upper_of(st, cid)
            raw = _get(st, upper)
        assert raw is not None
        if damage == "flip":
            bad: bytes | None = raw[:-1] + bytes([raw[-1] ^ 0x01])
        elif damage == "malformed":
            bad = b"\xc0"
        else:
            bad = None
        _edit(path, upper, bad)
        with open_store(path) as st:
            with pytest.raises(IntegrityError) as info, st.read(cid) as cp:
                cp.state()
            assert f"upper spine {upper.hex()}" in str(info.value.where)
            report = st.verify()
            assert not report.ok
            assert any(upper.hex() in f"{p.where} {p.got} {p.expected}" for p in report.problems)

    def test_an_unverified_read_of_a_wrong_upper_spine_still_fails_on_the_root_size(
        self, tmp_path: Path
    ) -> None:
        """verify=False skips the upper spine's digest; the root's size refuses lost levels."""
        path = tmp_path / "s"
        with open_store(path) as st:
            cid = st.recorder("r").checkpoint(1, {"h": _history(120)})
            root, upper = _root(st, cid), _upper_of(st, cid)
        _edit(path, upper, msgpack.packb([b""], use_bin_type=True))  # drops levels >= 2
        with (
            open_store(path) as st,
            st.backend.read_txn() as txn,
            pytest.raises(IntegrityError, match="does not match its digest"),
        ):
            load_tree(txn, objects_of(st.backend.dbs), root, b"\0" * 16, verify=False, where="s.h")


class TestLayoutFourStores:
    def test_a_layout_3_store_of_root_v1_trees_reads_upgrades_and_mixes(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """Root v1 trees read read-only; the store upgrades to 4; both root versions read, prune."""
        path = tmp_path / "s"
        with monkeypatch.context() as m:
            m.setattr(chunk_tree, "pack_root", _pack_root_v1)
            m.setattr(append_state, "pack_root", _pack_root_v1)
            with open_store(path) as st:
                rec = st.recorder("r")
                old = rec.checkpoint(1, {"h": _history(100)})
                log = cpstore.AppendLog()
                log.extend(_history(90))
                old_log = rec.checkpoint(2, {"h": _history(101), "log": log})
                assert isinstance(decode_value(_get(st, _root(st, old)) or b""), dict)
                assert isinstance(decode_value(_get(st, _root(st, old_log, "log")) or b""), dict)
        _set_version(path, 3)
        with open_store(path, readonly=True) as ro:
            assert ro.backend.layout == 3
            with ro.read(old_log) as cp:
                assert cp.state_part("log") == _history(90)
            assert ro.verify().ok
        with open_store(path) as st:
            assert st.backend.layout == STORE_VERSION
            rec = st.recorder("r", parent=old_log)
            new = rec.checkpoint(3, {"h": _history(102)})
            assert decode_value(_get(st, _root(st, new)) or b"")[0] == ROOT_VERSION
            for cid, n in ((old, 100), (old_log, 101), (new, 102)):
                with st.read(cid) as cp:
                    assert cp.state_part("h") == _history(n)
            assert st.verify().ok
            assert store_stats(st).logical_bytes > 0
            assert st.prune(keep_last=1) == 2
            assert st.verify().ok
            with st.read(new) as cp:
                assert cp.state_part("h") == _history(102)
            assert _get(st, _upper_of(st, new)) is not None

    def test_a_layout_3_build_refuses_a_layout_4_store(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A build that reads layouts 1-3 only opens a layout-4 store with FormatVersionError."""
        path = tmp_path / "s"
        with open_store(path) as st:
            st.recorder("r").checkpoint(1, {"h": _history(30)})
        old_records = {k: v for k, v in lmdb_open._FORMAT_RECORDS.items() if v <= 3}
        monkeypatch.setattr(lmdb_open, "READABLE_VERSIONS", (1, 2, 3))
        monkeypatch.setattr(lmdb_open, "_FORMAT_RECORDS", old_records)
        for readonly in (True, False):
            with pytest.raises(FormatVersionError) as info:
                open_store(path, readonly=readonly).close()
            assert info.value.got["version"] == STORE_VERSION

    def test_gc_keeps_an_upper_spine_shared_by_many_roots(self, tmp_path: Path) -> None:
        """Roots sharing an upper spine: a prune keeps the head's, sweeps the rest, verify is ok."""
        with open_store(tmp_path / "s") as st:
            rec = st.recorder("r")
            cids = [rec.checkpoint(i, {"h": _history(150 + i)}) for i in range(12)]
            uppers = [_upper_of(st, c) for c in cids]
            assert 1 < len(set(uppers)) < len(uppers)  # shared between consecutive roots, changing
            st.prune(keep_last=1)
            assert st.verify().ok
            assert _get(st, uppers[-1]) is not None
            assert all(_get(st, u) is None for u in set(uppers) - {uppers[-1]})  # no leak
            with st.read(cids[-1]) as cp:
                assert cp.state_part("h") == _history(161)
