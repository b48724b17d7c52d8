"""An open store holds descriptors, registry entries and holder marks; its close gives
every one of them back (audit14).

Since audit13 an open holds the data file LMDB opened by a descriptor of its own
(``lmdb_pages.TailCover.hold``), registers the environment by that file and looks at
the folder through ``/proc/self/fd`` (``lmdb_open.pin_folder``). A long-running agent
runtime opens and closes stores thousands of times: anything of this left behind per
open (a descriptor, a registry entry, a fork-close entry) would exhaust it, and
anything of ours still holding the store after its close would refuse another
process's compaction.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import cpstore
import cpstore.errors
from cpstore.store import lmdb_open, lmdb_pages, lmdb_registry_state
from cpstore.store.maintenance import compact_store

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd")


def _held() -> tuple[set[str], int, int, int, int]:
    """(this process's descriptors, registry entries by path and by file, stranded
    environments, fork-close descriptors)."""
    return (
        set(os.listdir("/proc/self/fd")),
        len(lmdb_registry_state._REGISTRY),
        len(lmdb_registry_state._BY_FILE),
        len(lmdb_registry_state._STRANDED),
        len(lmdb_open.FORK_CLOSED_FDS),
    )


def _compact_in_another_process(path: str) -> subprocess.CompletedProcess[str]:
    code = "import sys; from cpstore.store.maintenance import compact_store as c; c(sys.argv[1])"
    return subprocess.run(
        [sys.executable, "-c", code, path], capture_output=True, text=True, timeout=120, check=False
    )


def test_opening_and_closing_stores_again_and_again_gives_everything_back(
    tmp_path: Path,
) -> None:
    """Writable, read-only, durability="none", growing and refused opens, compaction
    between: after each close nothing of the open is held (descriptors, registry)."""
    path = str(tmp_path / "s")
    with cpstore.open(path) as first:
        ids = [first.recorder("w").checkpoint(0, {"i": 0})]
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "data.mdb").write_bytes(b"")  # an emptied data file: refused
    before = _held()
    for i in range(1, 121):
        with cpstore.open(path, map_size=1 << 20) as st:  # grows the map now and then
            ids.append(st.recorder("w").checkpoint(i, {"i": i, "pad": os.urandom(9000).hex()}))
            with st.read(ids[0]) as cp:
                assert cp.state() == {"i": 0}
        with cpstore.open(path, readonly=True) as st:
            assert len(st.history("w")) == i + 1
        with cpstore.open(path, durability="none") as st:
            st.recorder("n").checkpoint(i, {"i": i})
        with pytest.raises(cpstore.errors.FormatVersionError):
            cpstore.open(str(foreign))
        if i % 40 == 0:
            compact_store(path)
        assert _held() == before, i
    for i in range(60):  # many different stores
        with cpstore.open(str(tmp_path / f"m{i}")) as st:
            st.recorder("w").checkpoint(0, {"i": i})
    assert _held() == before
    done = _compact_in_another_process(path)
    assert done.returncode == 0, done.stderr
    with cpstore.open(path, readonly=True) as st:
        for i, cid in enumerate(ids):
            with st.read(cid) as cp:
                state = cp.state()
                assert isinstance(state, dict) and state["i"] == i
        assert st.verify().ok


def test_a_forked_child_of_a_process_with_the_store_open_does_not_hold_it_after_the_close(
    tmp_path: Path,
) -> None:
    """A fork() child (alive, idle) of a process that had the store open keeps no lock on
    it: once the parent closes, another process compacts it; the child itself cannot
    use the parent's store (ForkError)."""
    path = str(tmp_path / "s")
    st = cpstore.open(path)
    cid = st.recorder("w").checkpoint(0, {"pad": "y" * 50_000})
    go, wait = os.pipe()
    told, hear = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: says how its open went, then waits for the parent
        code = 1
        try:
            cpstore.open(path)
        except cpstore.errors.ForkError:
            code = 0
        except BaseException:
            code = 2
        os.write(hear, bytes([code]))
        os.read(go, 1)
        os._exit(0)
    try:
        assert os.read(told, 1) == b"\x00"  # ForkError in the child
        st.close()
        done = _compact_in_another_process(path)
        assert done.returncode == 0, done.stderr
    finally:
        os.write(wait, b"x")
        os.waitpid(pid, 0)
        for fd in (go, wait, told, hear):
            os.close(fd)
    with cpstore.open(path, readonly=True) as again, again.read(cid) as cp:
        assert cp.state() == {"pad": "y" * 50_000}


#: A child listing what its descriptors name, one a line.
_LIST_FDS = (
    "import os; print('\\n'.join(os.readlink('/proc/self/fd/' + f)"
    " for f in os.listdir('/proc/self/fd') if f.isdigit()"
    " and os.path.exists('/proc/self/fd/' + f)))"
)


@pytest.mark.parametrize("how", ["writable", "readonly", "none", "system"])
def test_a_child_process_inherits_no_descriptor_of_an_open_store(tmp_path: Path, how: str) -> None:
    """A program exec'd while a store is open (subprocess with close_fds=False, or
    os.system) inherits none of its descriptors: cpstore's (folder lock, holder mark, held
    data file) nor LMDB's (lock file, meta-page and data file descriptors)."""
    path = tmp_path / "s"
    with cpstore.open(str(path)) as st:
        st.recorder("w").checkpoint(0, {"i": 0})
    out = tmp_path / "fds.txt"
    with cpstore.open(
        str(path), readonly=how == "readonly", durability="none" if how == "none" else "sync"
    ) as st:
        if how != "readonly":
            st.recorder("w").checkpoint(1, {"i": 1})
        if how == "system":
            assert os.system(f'{sys.executable} -c "{_LIST_FDS}" > {out}') == 0
            listing = out.read_text().splitlines()
        else:
            listing = subprocess.run(
                [sys.executable, "-c", _LIST_FDS],
                capture_output=True,
                text=True,
                close_fds=False,
                timeout=60,
                check=True,
            ).stdout.splitlines()
    assert listing, listing  # the child listed its descriptors (stdin, stdout, ...)
    ours = [t for t in listing if t.startswith(str(path))]
    assert ours == [], ours


def test_the_held_data_file_of_a_pinned_folder_is_read_through_its_own_descriptor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TailCover.hold of a folder pinned through /proc names the data file it holds by
    /proc/self/fd/<held> (the same file, whatever is renamed later) without looking
    again; an unpinned folder whose /proc view is missing falls back to the plain path."""
    cpstore.open(tmp_path / "s").close()
    folder = str(tmp_path / "s")
    data = os.path.join(folder, "data.mdb")
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    pinned = lmdb_pages.TailCover(data, 4096)
    plain = lmdb_pages.TailCover(data, 4096)
    try:
        at = pinned.hold(f"/proc/self/fd/{fd}", writable=False)
        assert at == f"/proc/self/fd/{pinned.held}"
        st, want = os.stat(at), os.stat(data)
        assert (st.st_dev, st.st_ino) == (want.st_dev, want.st_ino)
        monkeypatch.setattr(os.path, "exists", lambda _path: False)  # no /proc here
        assert plain.hold(folder, writable=False) == data
        assert plain.held is not None
    finally:
        pinned.close()
        plain.close()
        os.close(fd)


def test_a_store_path_is_checked_as_text_unless_it_is_an_ascii_str(tmp_path: Path) -> None:
    """cpstore.open() of an ASCII str path opens; a non-ASCII name opens too, a lone
    surrogate or a non-path (42) is InvalidInputError before anything is made."""
    cpstore.open(str(tmp_path / "ascii")).close()
    cpstore.open(str(tmp_path / "stöд")).close()
    for bad in (str(tmp_path / "x\ud800"), 42):
        with pytest.raises(cpstore.InvalidInputError):
            cpstore.open(bad)  # type: ignore[arg-type]
    assert sorted(os.listdir(tmp_path)) == ["ascii", "stöд"]


def test_a_bytes_store_path_opens_the_store_its_str_names(tmp_path: Path) -> None:
    """cpstore.open() of a bytes path (or a path-like of bytes) opens the store the same
    path as str names (not a TypeError from joining str and bytes); undecodable bytes are
    InvalidInputError before anything is made."""

    class BytesPath:
        def __init__(self, raw: bytes) -> None:
            self.raw = raw

        def __fspath__(self) -> bytes:
            return self.raw

    folder = tmp_path / "s"
    with cpstore.open(str(folder)) as store:
        kept = store.put_object(b"kept")
    for given in (os.fsencode(folder), BytesPath(os.fsencode(folder))):
        with cpstore.open(given, readonly=True) as store:  # type: ignore[arg-type]
            assert store.get_object(kept) == b"kept"
            assert store.path == str(folder)
    with pytest.raises(cpstore.InvalidInputError):
        cpstore.open(os.fsencode(tmp_path) + b"/\xff")  # type: ignore[arg-type]
    assert sorted(os.listdir(tmp_path)) == ["s"]
