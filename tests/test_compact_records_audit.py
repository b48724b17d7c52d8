"""Audit of store layout 6 (compact ``r`` record entries): what a damaged or rewritten
record must never lead to, on both record entry kinds (``c``: layout 5, ``r``: layout 6).
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st_
from stored import edit_raw, record_entry, to_layout_5

import cpstore
from cpstore.errors import IntegrityError, StoreError
from cpstore.native.canonical import encode_value
from cpstore.store import lmdb_env, lmdb_holders, record_codec
from cpstore.store.content import KIND_COMPACT
from cpstore.store.heap_check import heap_problems
from cpstore.store.manifest import check_manifest_state
from cpstore.store.record_codec import (
    RECORD_DICT,
    compress_record,
    frame_problem,
    inflate_record,
    why_not,
)


def _lineage_with_a_forged_parent(path: Path, *, layout_5: bool) -> list[str]:
    """A run "keep" of four checkpoints and a run "other" of one; the head's record is
    rewritten (behind the store) so that its manifest names no parent (it then no longer
    hashes to the head's id). Returns the ids of "keep", oldest first."""
    with cpstore.open(path) as st:
        rec = st.recorder("keep")
        ids = [rec.checkpoint(i, {"a": i}) for i in range(4)]
        st.recorder("other").checkpoint(0, {"b": 1})
    if layout_5:
        to_layout_5(path)
    parent = bytes.fromhex(ids[-2])

    def forge(old: bytes | None) -> bytes:
        assert old is not None
        at = old.index(parent)
        return old[:at] + bytes(16) + old[at + 16 :]

    edit_raw(path, "checkpoints", bytes.fromhex(ids[-1]), forge)
    return ids


@pytest.mark.parametrize("kind", ["r", "c"])
def test_gc_stops_at_a_kept_record_that_does_not_hash_to_its_id(tmp_path: Path, kind: str) -> None:
    """A kept head whose record is damaged stops the sweep (IntegrityError naming it):
    its damaged parent field must not make the sound ancestors look unreachable."""
    path = tmp_path / "s"
    ids = _lineage_with_a_forged_parent(path, layout_5=kind == "c")
    with cpstore.open(path) as st:
        with pytest.raises(IntegrityError) as info:
            st.delete_run("other")
        assert ids[-1] in str(info.value.where)
        for cid in ids[:-1]:
            with st.read(cid) as cp:
                assert cp.state() == {"a": ids.index(cid)}
        with pytest.raises(IntegrityError):
            st.read(ids[-1]).__enter__()


#: An older release's read-only open, as its code runs it: the folder's creation lock
#: (shared) around LMDB's open, then the format record read in a read txn.
_OLDER_READ_ONLY_OPEN = """
import fcntl, os, sys, lmdb
from cpstore.native.canonical import decode_value
fd = os.open(sys.argv[1], os.O_RDONLY | os.O_DIRECTORY)
print("locking", flush=True)
fcntl.flock(fd, fcntl.LOCK_SH)
env = lmdb.open(sys.argv[1], max_dbs=16, readonly=True)
os.close(fd)
with env.begin() as txn:
    raw = txn.get(b"format", db=env.open_db(b"meta", txn=txn, create=False))
print(decode_value(raw)["version"], flush=True)
sys.stdin.readline()
"""


def _waits_for_flock(pid: int, folder: str) -> bool:
    """True when ``pid`` is listed in /proc/locks as waiting for a flock on ``folder``."""
    inode = str(os.stat(folder).st_ino)
    with open("/proc/locks", encoding="ascii", errors="replace") as f:
        for line in f:
            fields = line.split()
            if (
                len(fields) > 6
                and fields[1:3] == ["->", "FLOCK"]
                and fields[5] == str(pid)
                and fields[6].rpartition(":")[2] == inode
            ):
                return True
    return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/locks")
def test_an_older_read_only_open_racing_the_upgrade_never_reads_the_old_layout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An older release opening read-only between the upgrade's holder check and its commit
    must not go on at layout 5 (it would read every r entry as damage): it waits for the
    upgrade and reads layout 6 (which that release refuses), or the upgrade refuses."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        st.recorder("r").checkpoint(0, {"a": 1})
    to_layout_5(path)
    real = lmdb_holders.refuse_beside_older_holders
    children: list[subprocess.Popen[str]] = []
    versions: list[str] = []

    def check_then_an_older_open_starts(
        folder: str, found: int, wanted: int, **kwargs: Any
    ) -> None:
        real(folder, found, wanted, **kwargs)  # nobody older holds it: the upgrade goes on...
        child = subprocess.Popen(  # ...and an older release starts to open it now
            # (``folder`` may be this process's /proc/self/fd name of it: its real path)
            [sys.executable, "-c", _OLDER_READ_ONLY_OPEN, os.path.realpath(folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        children.append(child)
        assert child.stdout is not None and child.stdout.readline().strip() == "locking"
        for _ in range(1200):  # until it has read the format record, or waits to open
            if select.select([child.stdout], [], [], 0.05)[0]:
                versions.append(child.stdout.readline().strip())
                return
            if _waits_for_flock(child.pid, folder):
                return
        raise AssertionError("the older open neither read nor waited")

    monkeypatch.setattr(lmdb_env, "refuse_beside_older_holders", check_then_an_older_open_starts)
    try:
        try:
            upgraded = cpstore.open(path)
        except StoreError:
            return  # refused: nothing upgraded beside the older reader
        with upgraded as st:
            assert st.backend.layout == 6
            (child,) = children
            assert child.stdout is not None
            if not versions:
                versions.append(child.stdout.readline().strip())
            assert versions == ["6"]
    finally:
        for child in children:
            assert child.stdin is not None
            child.stdin.write("\n")
            child.stdin.flush()
            child.wait(timeout=60)


def test_a_damaged_compact_frame_is_not_also_reported_as_garbage(tmp_path: Path) -> None:
    """A damaged frame in the entry cloc names (its kind and key intact) is reported at
    cloc/<id> -> heap/<seq>, never as "a heap entry no location index names": it is named."""
    with cpstore.open(tmp_path / "s") as st:
        cid = st.recorder("r").checkpoint(0, {"a": 1})
        seq, entry = record_entry(st, cid)
        with st.backend.env.env.begin(write=True) as txn:
            txn.put(seq, entry + b"\x00", db=st.backend.dbs["heap"])
        at = int.from_bytes(seq, "big")
        with st.backend.read_txn() as txn:
            found = heap_problems(txn, st.backend.dbs)
        assert [p.where for p in found] == [f"cloc/{cid} -> heap/{at}"]
        # verify() reports what the frame should have been, not only what it is.
        assert found[0].expected is not None and found[0].got is not None
        (reported,) = [p for p in st.verify().problems if p.where == found[0].where]
        assert (reported.expected, reported.got) == (found[0].expected, found[0].got)
        assert not any(p.where == f"heap/{at}" for p in st.verify().problems)


_UPGRADE_AND_RECORD = """
import sys, cpstore
with cpstore.open(sys.argv[1]) as st:
    print(st.recorder("new").checkpoint(0, {"b": 2}), st.backend.layout, flush=True)
"""


def test_a_read_only_handle_opened_at_layout_5_reads_r_entries_another_process_wrote(
    tmp_path: Path,
) -> None:
    """Another process upgrades to 6 and records an r entry while this read-only handle
    (opened at 5, c entries) stays open: the handle reads it, verified, and verify is clean."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        old = st.recorder("old").checkpoint(0, {"a": 1})
    to_layout_5(path)
    with cpstore.open(path, readonly=True) as ro:
        assert ro.backend.layout == 5
        with ro.read(old) as cp:
            assert cp.state() == {"a": 1}
        out = subprocess.run(
            [sys.executable, "-c", _UPGRADE_AND_RECORD, str(path)],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.split()
        assert out[1] == "6"
        with ro.read(out[0]) as cp:
            assert cp.state() == {"b": 2}
        with ro.backend.read_txn() as txn:
            assert ro.backend.layout_in(txn) == 6
        assert record_entry(ro, out[0])[1][0] == KIND_COMPACT
        assert ro.verify().ok


def test_a_verify_false_read_of_a_record_without_its_parts_map_is_an_integrity_error(
    tmp_path: Path,
) -> None:
    """A damaged record whose state says kind "parts" but has no parts map: a verify=False
    read raises IntegrityError naming state.parts (it raised a bare KeyError); a state
    without its chunked map reads as none chunked."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        cid = st.recorder("r").checkpoint(0, {"a": 1})
    for drop, dest in (("parts", tmp_path / "p"), ("chunked", tmp_path / "c")):

        def without(old: bytes | None, drop: str = drop) -> bytes:
            assert old is not None
            m = dict(check_manifest_state(b"", old[16:]))
            m["state"] = {k: v for k, v in m["state"].items() if k != drop}
            return old[:16] + encode_value(m)

        shutil.copytree(path, dest)
        edit_raw(dest, "checkpoints", bytes.fromhex(cid), without)
        with cpstore.open(dest) as st:
            if drop == "parts":
                with pytest.raises(IntegrityError) as info, st.read(cid, verify=False) as cp:
                    cp.state()
                assert str(info.value.where).endswith("state.parts")
            else:
                with st.read(cid, verify=False) as cp:
                    assert cp.state() == {"a": 1}


@settings(max_examples=400, deadline=None)
@given(
    st_.sampled_from([0x20, 0x60, 0xA0, 0xE0]),
    st_.integers(0, 1 << 18),
    st_.sampled_from([0, 1, 2, 3, 4, 5, 6, 7]),
    st_.integers(0, 300),
    st_.binary(max_size=300),
)
def test_the_shape_check_and_its_reason_agree_on_every_frame_header(
    descriptor: int, size: int, block_type: int, block_size: int, body: bytes
) -> None:
    """frame_problem says None exactly when the read path's shape check passes (_declared):
    why_not never reports a "does not inflate to its declared size" of -1."""
    width = {0x20: 1, 0x60: 2, 0xA0: 4, 0xE0: 8}[descriptor]
    fcs = (size - 256 if descriptor == 0x60 else size) % (1 << (8 * width))
    frame = (
        b"\x28\xb5\x2f\xfd"
        + bytes((descriptor,))
        + fcs.to_bytes(width, "little")
        + ((block_size << 3) | block_type).to_bytes(3, "little")
        + body
    )
    assert (frame_problem(frame) is None) == (record_codec._declared(frame) >= 0)
    if inflate_record(frame) is None:
        assert why_not(frame)[1] != -1


def test_the_frame_inflated_is_the_frame_checked_even_if_the_bytes_under_a_view_change(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A view whose bytes change between the shape check and the inflate (a read-only open
    without the lock file beside a writer that reuses the page) still inflates what was
    checked: never a bomb's declared size (zstd allocates it: MemoryError)."""
    record = b"\x00" * 16 + RECORD_DICT
    frame = compress_record(record)
    assert frame is not None
    under = bytearray(frame)
    real = record_codec._CONTEXTS.decompressor

    class Rewritten:
        """Rewrites the frame under the view to a 64 GiB bomb, then inflates."""

        def decompress(self, data: Any) -> bytes:
            under[4:13] = b"\xe0" + (1 << 36).to_bytes(8, "little")
            out: bytes = real.decompress(data)
            return out

    monkeypatch.setattr(record_codec._CONTEXTS, "decompressor", Rewritten())
    assert inflate_record(memoryview(under)) == record


@pytest.mark.parametrize("kind", ["r", "c"])
def test_gc_leaves_a_dead_record_that_does_not_hash_and_sweeps_nothing_it_names(
    tmp_path: Path, kind: str
) -> None:
    """A swept record rewritten to name another object (so no longer its id's manifest)
    is left in place for verify, and the object it now names is not deleted."""
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        keep = st.recorder("keep").checkpoint(0, {"a": 1})
        doomed = st.recorder("other").checkpoint(0, {"b": 2})
        loose = st.put_object(encode_value("not the dead checkpoint's"))
        assert st.unpin_object(loose)
        with st.read(doomed) as cp:
            part = bytes.fromhex(cp.manifest.state_parts["b"])
    if kind == "c":
        to_layout_5(path)
    edit_raw(
        path,
        "checkpoints",
        bytes.fromhex(doomed),
        lambda old: (old or b"").replace(part, loose),
    )
    with cpstore.open(path) as st:
        assert st.delete_run("other") == 0
        assert st.has_object(loose)
        assert st.has_object(part)  # the real part is not taken either: nothing it names is
        assert any(doomed in p.where for p in st.verify().problems)
        with st.read(keep) as cp:
            assert cp.state() == {"a": 1}
