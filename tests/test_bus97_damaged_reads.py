"""bus97: the commands that read a store in process (``stats``, ``log``; ``inspect``,
``push`` for MDB_BAD_TXN) tell a damaged LMDB data file as damage, exit 5, never a bus
error or "store unavailable".

* A leaf's value length enlarged past the end of ``data.mdb`` (LMDB checks no node size;
  its 1 GiB map runs past the 32 KiB file): the read touched memory past the file's end
  and the process died of SIGBUS, no word, no exit code of cpstore's. ``stats`` and
  ``log`` now read in a child (cpstore.cli.child.reads_in_child), as ``verify`` does;
  so do ``inspect``/``show``, ``diff``, ``push`` and ``pull`` since damage98 (``inspect``
  and ``push`` were strict xfails here).
* A table's root pointed past the file (as in test_cli96_damaged_table): "LMDB failed ...
  MDB_BAD_TXN", exit 7. A read-only environment's MDB_BAD_TXN is damage
  (lmdb_errors.translate's ``readonly``); a writable one's stays a StoreError, since a
  write txn used after a failed put is MDB_BAD_TXN too (a cpstore bug, not the file).
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

import lmdb
import pytest
from small_store import compact_small_store, leaf_nodes

import cpstore
from cpstore import cli
from cpstore.errors import IntegrityError, StoreError
from cpstore.store.lmdb_errors import translate
from cpstore.store.stats import store_stats

_ROOT = str(Path(__file__).resolve().parents[1])


def _values_past_the_file(path: str) -> bytes:
    """Every plain leaf node with a 16-byte key gets 1 MiB more value length (its
    high 16 bits of size): its value now runs past the file's end. The file after."""
    data_path = os.path.join(path, "data.mdb")
    data = bytearray(Path(data_path).read_bytes())
    hit = 0
    for node in leaf_nodes(data):
        hi, node_flags, key_size = struct.unpack_from("<HHH", data, node + 2)
        if key_size == 16 and node_flags == 0:
            struct.pack_into("<H", data, node + 2, hi | 0x10)
            hit += 1
    assert hit, "no leaf node with a 16-byte key in the file"
    Path(data_path).write_bytes(data)
    return bytes(data)


def _point_root_past_the_file(path: str, table: str) -> None:
    """``table``'s root page number past the file in every copy of its record."""
    data_path = os.path.join(path, "data.mdb")
    data = bytearray(Path(data_path).read_bytes())
    key = table.encode()
    node = struct.pack("<HHHH", 48, 0, 2, len(key)) + key  # MDB_db record, F_SUBDATA
    at = data.find(node)
    assert at >= 0
    while at >= 0:
        struct.pack_into("<Q", data, at + len(node) + 40, 0x7FFFFFFF)
        at = data.find(node, at + 1)
    Path(data_path).write_bytes(data)


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=_ROOT)
    return subprocess.run(
        [sys.executable, "-m", "cpstore.cli", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ("stats",),
        ("log",),
        ("log", "run"),
        ("inspect", "run@main"),  # was SIGBUS until damage98 (strict xfail)
        ("show", "run@main"),
        ("diff", "run@main~1", "run@main"),
        ("push", "DEST"),  # was SIGBUS until damage98 (strict xfail)
        ("pull", "SOURCE"),
    ],
)
def test_a_value_past_the_end_of_the_file_is_damage_not_a_bus_error(
    tmp_path: Path, argv: tuple[str, ...]
) -> None:
    path = compact_small_store(tmp_path)
    damaged = _values_past_the_file(path)
    dest = tmp_path / "dest"
    args = [str(dest) if a == "DEST" else path if a == "SOURCE" else a for a in argv]
    done = _cli(*args, "--store", str(dest) if argv[0] == "pull" else path)
    assert done.returncode == 5, (done.returncode, done.stderr)  # was -SIGBUS
    assert done.stderr.startswith(f"cpstore {argv[0]}: the data file is damaged: liblmdb died")
    assert path in done.stderr and done.stdout == ""
    assert Path(path, "data.mdb").read_bytes() == damaged  # only looked
    if dest.exists():  # push, pull: the receiver opens again, whole, none of it landed
        with cpstore.open(str(dest), readonly=True, create=False) as store:
            report = store.verify()
            assert report.ok and not report.counts["checkpoints"], report


@pytest.mark.parametrize("table", ["heap", "refs"])
@pytest.mark.parametrize("argv", [("stats",), ("log",), ("log", "run"), ("push", "DEST")])
def test_a_table_root_past_the_file_is_damage_in_the_reading_commands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], table: str, argv: tuple[str, ...]
) -> None:
    path = compact_small_store(tmp_path)
    _point_root_past_the_file(path, table)
    capsys.readouterr()  # the copy's line
    dest = tmp_path / "dest"
    args = [str(dest) if a == "DEST" else a for a in argv]
    code = cli.main([*args, "--store", path])
    out, err = capsys.readouterr()
    assert code == 5, err  # was 7, "LMDB failed ... MDB_BAD_TXN"
    assert err.startswith(f"cpstore {argv[0]}: the LMDB data file is corrupt") and out == ""


def _bad_txn() -> lmdb.BadTxnError:
    """A write txn used after its put failed MDB_MAP_FULL: LMDB's MDB_BAD_TXN with no
    damage anywhere (what a cpstore bug would meet)."""
    with tempfile.TemporaryDirectory() as folder:
        env = lmdb.open(folder, map_size=1 << 16)
        try:
            txn = env.begin(write=True)
            with pytest.raises(lmdb.MapFullError):
                for i in range(10_000):
                    txn.put(b"%d" % i, b"v" * 100)
            with pytest.raises(lmdb.BadTxnError) as caught:
                txn.put(b"k", b"v")
            txn.abort()
        finally:
            env.close()
    return caught.value


def test_bad_txn_is_damage_only_in_a_read_only_environment() -> None:
    exc = _bad_txn()
    assert type(translate(exc, "x")) is StoreError  # a writable store's: maybe a bug of ours
    assert isinstance(translate(exc, "x", readonly=True), IntegrityError)


@pytest.mark.parametrize("table", ["objects", "heap"])
def test_a_library_reader_of_a_read_only_store_is_told_damage_too(
    tmp_path: Path, table: str
) -> None:
    """Not only the CLI: the store's own translation says IntegrityError for MDB_BAD_TXN
    on a read-only store (before, a plain StoreError "LMDB failed ... MDB_BAD_TXN")."""
    path = compact_small_store(tmp_path)
    _point_root_past_the_file(path, table)
    with cpstore.open(path, readonly=True) as store, pytest.raises(IntegrityError) as told:
        store_stats(store)
    assert "MDB_BAD_TXN" in str(told.value)
