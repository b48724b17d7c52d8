"""Test helper: a small store of three checkpoints with observations and random blobs,
for the operator tools' tests (copy, verify, compact) to damage or interrupt, and a walk
of the plain leaf nodes of an LMDB data file for the tests that damage one."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from pathlib import Path

import cpstore
from cpstore import cli

__all__ = ["compact_small_store", "flip_key", "leaf_nodes", "small_store"]

_PAGE = 4096
_P_LEAF, _P_LEAF2 = 0x02, 0x20


def small_store(tmp_path: Path, name: str) -> str:
    """The folder of a new store ``tmp_path / name``: run "run", steps 1-3, closed."""
    path = str(tmp_path / name)
    with cpstore.open(path) as store:
        rec = store.recorder("run")
        for step in range(1, 4):
            rec.observe(step, "cfg", os.urandom(64), pinned_at=1.0)
            rec.checkpoint(step, {"blob": os.urandom(256)}, seal_ledger=False)
    return path


def compact_small_store(tmp_path: Path) -> str:
    """A :func:`small_store` (``tmp_path / "raw"``) copied (compacted) to ``tmp_path /
    "store"``: every page of the file a live one, each record once in it."""
    raw = small_store(tmp_path, "raw")
    compact = str(tmp_path / "store")
    if cli.main(["copy", compact, "--store", raw]) != 0:
        raise RuntimeError(f"cpstore copy of {raw} failed")
    return compact


def leaf_nodes(data: bytes | bytearray) -> Iterator[int]:
    """The offset of every node on a plain leaf page of an LMDB data file (4 KiB pages;
    pages 0 and 1, the meta pages, and LEAF2 pages skipped). A node: ``<HHHH`` lo, hi,
    flags, key size, then the key at offset 8."""
    for page in range(2, len(data) // _PAGE):
        at = page * _PAGE
        flags, lower = struct.unpack_from("<HH", data, at + 10)
        if not flags & _P_LEAF or flags & _P_LEAF2:
            continue
        for i in range((lower - 16) // 2):
            yield at + struct.unpack_from("<H", data, at + 16 + 2 * i)[0]


def flip_key(path: str, key: bytes) -> bytes:
    """One bit of the last byte of the leaf node keyed ``key`` in ``path``'s data file
    flipped (the key must be on exactly one leaf: a compacted store); the file after."""
    data_path = os.path.join(path, "data.mdb")
    data = bytearray(Path(data_path).read_bytes())
    hit = 0
    for node in leaf_nodes(data):
        size = struct.unpack_from("<H", data, node + 6)[0]
        if data[node + 8 : node + 8 + size] == key:
            data[node + 8 + size - 1] ^= 0x01
            hit += 1
    if hit != 1:
        raise AssertionError(f"{hit} leaf nodes keyed {key!r}, not 1")
    Path(data_path).write_bytes(data)
    return bytes(data)
