"""Root v1 (layout 3: every level's tail inline) has the same bound as root v2: a 64-level
tree is read, verified and swept around like any other; 65 levels is malformed.

audit40: read_root checks a v1 spine's length itself (``<= MAX_LEVEL``), apart from
read_upper's ``< MAX_LEVEL`` for v2's upper spine and pack_root's guard; the three must
agree at the edge. Layout-3 writers had no height guard, so a v1 root is written here
the way tests/test_chunk_tree_root_v2.py writes one (the reader tells roots by shape).
"""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest
from tall_tree import DATA, FORCED_64, FORCED_65, force_ends

import cpstore
from cpstore.errors import IntegrityError
from cpstore.native.binding import digest
from cpstore.store import chunk_tree
from cpstore.store.chunk_tree import MAX_LEVEL


def _v1(head: bytes, size: int, spine: list[bytes], out: dict[bytes, bytes]) -> bytes:
    root: bytes = msgpack.packb({"head": head, "size": size, "spine": spine}, use_bin_type=True)
    out[digest(root)] = root
    return digest(root)


def _store(store: cpstore.Store, mp: pytest.MonkeyPatch, forced: int) -> tuple[str, int]:
    with mp.context() as m:
        force_ends(m, forced)
        m.setattr(chunk_tree, "pack_root", _v1)
        cid = store.recorder("r").checkpoint(0, {"big": DATA})
    root = store.manifest(cid).raw["state"]["chunked"]["big"]
    return cid, len(msgpack.unpackb(store.get_object(root))["spine"])


def test_a_64_level_v1_root_is_read_verified_and_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cpstore.open(tmp_path / "s") as store:
        cid, levels = _store(store, monkeypatch, FORCED_64)
        assert levels == MAX_LEVEL
        store.recorder("other").checkpoint(0, {"x": 1})
        assert store.gc(delete_run="other").checkpoints != ()
        with store.read(cid) as cp:
            assert cp.state_part("big") == DATA
        assert store.verify_checkpoint(cid) == ()
        assert store.verify().ok


def test_a_65_level_v1_root_is_malformed_to_every_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with cpstore.open(tmp_path / "s") as store:
        cid, levels = _store(store, monkeypatch, FORCED_65)
        assert levels == MAX_LEVEL + 1
        with pytest.raises(IntegrityError, match="chunk index is malformed"), store.read(cid) as cp:
            cp.state_part("big")
        assert not store.verify().ok
