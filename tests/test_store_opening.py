"""Opening a store: what becomes a new store, what is refused, and read-only access.

A store is created only in a missing or empty folder; an empty or foreign
data.mdb is refused and left as it was; read-only opens and every CLI command
never create. A user who may read a store but not write its folder can still
verify and read it (the readers here really are unprivileged: root ignores
file modes, so the child drops to the ``nobody`` user).
"""

from __future__ import annotations

import contextlib
import io
import locale  # noqa: F401 - argparse imports it lazily; the unprivileged child cannot
import multiprocessing
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypedDict

import lmdb
import pytest
from test_refs_integrity import _make_v1

import cpstore
from cpstore import cli
from cpstore.errors import (
    FormatVersionError,
    IntegrityError,
    NotFoundError,
    StoreReadOnlyError,
)
from cpstore.native.canonical import decode_value
from cpstore.store.lmdb_pages import check_data_size, highest_reachable_page
from cpstore.store.model import STORE_VERSION


class _Flags(TypedDict, total=False):
    """The open() flags these tests vary."""

    create: bool
    readonly: bool


def _make_store(path: str) -> tuple[str, str]:
    """A store with one run of two checkpoints; (first id, head id)."""
    with cpstore.open(path) as store:
        rec = store.recorder("run-a")
        rec.token("rng", 7)
        first = rec.checkpoint(1, {"memory": "hello"})
        head = rec.checkpoint(2, {"memory": "hello again"})
    return first, head


def _cli(argv: list[str]) -> tuple[int, str, str]:
    """Run the CLI in-process; (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(argv)
    return code, out.getvalue(), err.getvalue()


def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir())}


# -- what becomes a store --------------------------------------------------------


class TestCreation:
    def test_a_missing_folder_becomes_a_new_store(self, tmp_path: Path) -> None:
        """open() makes a store where nothing is."""
        with cpstore.open(tmp_path / "new") as store:
            assert store.runs() == []
        assert (tmp_path / "new" / "data.mdb").is_file()

    def test_an_empty_folder_becomes_a_new_store(self, tmp_path: Path) -> None:
        """open() makes a store in an empty folder (nothing there can be lost)."""
        (tmp_path / "empty").mkdir()
        with cpstore.open(tmp_path / "empty") as store:
            assert store.verify().ok

    def test_create_false_and_readonly_never_create(self, tmp_path: Path) -> None:
        """A missing or empty folder opened with create=False or readonly is NotFoundError."""
        (tmp_path / "empty").mkdir()
        for where in (tmp_path / "missing", tmp_path / "empty"):
            with pytest.raises(NotFoundError):
                cpstore.open(where, create=False)
            with pytest.raises(NotFoundError):
                cpstore.open(where, readonly=True)
        assert not (tmp_path / "missing").exists()
        assert list((tmp_path / "empty").iterdir()) == []

    def test_a_folder_of_other_files_is_refused_not_adopted(self, tmp_path: Path) -> None:
        """A non-empty folder without data.mdb is not a store and is not made one."""
        (tmp_path / "docs").mkdir()
        (tmp_path / "docs" / "notes.txt").write_text("mine")
        with pytest.raises(FormatVersionError, match="not a cpstore store") as info:
            cpstore.open(tmp_path / "docs")
        assert str(tmp_path / "docs") in str(info.value)
        assert _files(tmp_path / "docs") == {"notes.txt": b"mine"}

    def test_an_environment_never_committed_to_becomes_a_store_only_when_creating(
        self, tmp_path: Path
    ) -> None:
        """A data.mdb LMDB made but never committed to (a crash at creation) holds nothing."""
        path = tmp_path / "s"
        lmdb.open(str(path), max_dbs=4).close()
        flag_sets: tuple[_Flags, ...] = ({"create": False}, {"readonly": True})
        for kwargs in flag_sets:
            with pytest.raises(NotFoundError, match="empty LMDB environment"):
                cpstore.open(path, **kwargs)
        with cpstore.open(path) as store:
            assert store.verify().ok

    def test_processes_creating_one_store_at_once_all_open_it(self, tmp_path: Path) -> None:
        """Four processes opening one new folder at once: all succeed, one store results."""
        path = str(tmp_path / "s")
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(4) as pool:
            heads = pool.starmap(_record_one, [(path, f"r{i}") for i in range(4)])
        with cpstore.open(path, readonly=True) as store:
            assert sorted(store.runs()) == ["r0", "r1", "r2", "r3"]
            assert [store.ref(f"r{i}") for i in range(4)] == heads
            assert store.verify().ok


def _record_one(path: str, run: str) -> str:
    with cpstore.open(path) as store:
        return store.recorder(run).checkpoint(1, {"run": run})


def _create_when_told(path: str, go: Any, results: Any) -> None:
    """Open ``path`` (a new store) once ``go`` is set; put "ok" or the error on ``results``."""
    go.wait(30)
    try:
        with cpstore.open(path) as store:
            store.recorder(f"r{os.getpid()}").checkpoint(0, b"x")
    except Exception as exc:
        results.put(f"{type(exc).__name__}: {exc}")
        return
    results.put("ok")


class TestCreationRace:
    def test_processes_released_together_all_create_one_new_store(self, tmp_path: Path) -> None:
        """100 trials of 5 processes opening one new store at the same instant: none refused."""
        # fork (no store is open here): processes start in milliseconds, so they
        # really meet inside LMDB's creation of data.mdb.
        ctx = multiprocessing.get_context("fork")
        failures: list[str] = []
        for trial in range(100):
            path = str(tmp_path / f"s{trial}")
            go, results = ctx.Event(), ctx.Queue()
            procs = [
                ctx.Process(target=_create_when_told, args=(path, go, results)) for _ in range(5)
            ]
            for proc in procs:
                proc.start()
            go.set()
            got = [results.get(timeout=60) for _ in procs]
            for proc in procs:
                proc.join()
            failures += [g for g in got if g != "ok"]
            with cpstore.open(path, readonly=True) as store:
                assert len(store.runs()) == got.count("ok")
        assert failures == []


# -- what is refused -------------------------------------------------------------


class TestRefusal:
    def test_an_emptied_data_file_is_refused_not_reinitialised(self, tmp_path: Path) -> None:
        """data.mdb truncated to 0 bytes: every open is refused and the file stays as it was."""
        path = tmp_path / "s"
        _make_store(str(path))
        (path / "data.mdb").write_bytes(b"")
        flag_sets: tuple[_Flags, ...] = ({}, {"readonly": True}, {"create": False})
        for kwargs in flag_sets:
            with pytest.raises(FormatVersionError, match=r"data\.mdb is empty") as info:
                cpstore.open(path, **kwargs)
            assert str(path / "data.mdb") in str(info.value)
        assert (path / "data.mdb").stat().st_size == 0
        code, _, err = _cli(["verify", "--store", str(path)])
        assert code not in (0, 1) and "data.mdb is empty" in err

    def test_a_data_mdb_directory_or_fifo_is_refused_never_opened(self, tmp_path: Path) -> None:
        """data.mdb a directory: refused by name; a FIFO: not a store (one stat decides both)."""
        folder = tmp_path / "d"
        (folder / "data.mdb").mkdir(parents=True)
        flag_sets: tuple[_Flags, ...] = ({}, {"readonly": True}, {"create": False})
        for kwargs in flag_sets:
            with pytest.raises(FormatVersionError, match=r"data\.mdb is a directory"):
                cpstore.open(folder, **kwargs)
        fifo = tmp_path / "f"
        fifo.mkdir()
        os.mkfifo(fifo / "data.mdb")
        with pytest.raises(FormatVersionError, match="not empty"):
            cpstore.open(fifo)
        never_create: tuple[_Flags, ...] = ({"readonly": True}, {"create": False})
        for flags in never_create:
            with pytest.raises(NotFoundError):
                cpstore.open(fifo, **flags)
        assert sorted(p.name for p in fifo.iterdir()) == ["data.mdb"]

    @pytest.mark.parametrize("named_db", [True, False], ids=["named-db", "main-db-only"])
    def test_a_foreign_lmdb_environment_is_refused_not_converted(
        self, tmp_path: Path, named_db: bool
    ) -> None:
        """Another program's LMDB environment is refused by open() and left unchanged."""
        path = tmp_path / "foreign"
        env = lmdb.open(str(path), max_dbs=4)
        with env.begin(write=True) as txn:
            db = env.open_db(b"theirs", txn=txn) if named_db else None
            txn.put(b"key", b"value", db=db)
        env.close()
        before = (path / "data.mdb").read_bytes()
        flag_sets: tuple[_Flags, ...] = ({}, {"readonly": True})
        for kwargs in flag_sets:
            with pytest.raises(FormatVersionError, match="not a cpstore store") as info:
                cpstore.open(path, **kwargs)
            assert str(path) in str(info.value)
        assert (path / "data.mdb").read_bytes() == before
        env = lmdb.open(str(path), max_dbs=4, readonly=True)
        with env.begin() as txn:
            assert [bytes(k) for k, _ in txn.cursor()] == [b"theirs" if named_db else b"key"]
        env.close()

    @pytest.mark.parametrize(
        "argv",
        [
            ["validate", "00" * 16, "00" * 16, "--store"],
            ["validate", "00" * 16, "00" * 16, "--no-record", "--store"],
            ["verify", "--store"],
            ["log", "--store"],
            ["stats", "--store"],
        ],
        ids=["validate", "validate-no-record", "verify", "log", "stats"],
    )
    def test_no_command_makes_a_store_in_an_empty_folder(
        self, tmp_path: Path, argv: list[str]
    ) -> None:
        """A command given an empty folder says no store is there and leaves it empty."""
        (tmp_path / "empty").mkdir()
        code, _, err = _cli([*argv, str(tmp_path / "empty")])
        assert code == cli.EXIT_NOT_FOUND, err
        assert "no store" in err and len(err.splitlines()) == 1
        assert list((tmp_path / "empty").iterdir()) == []

    def test_a_store_missing_a_database_its_layout_has_is_refused_on_a_writable_open(
        self, tmp_path: Path
    ) -> None:
        """``audit_mac`` is in every layout but the first build's layout 1 (where a
        writable open still adds it: tests/test_damage98_table_names.py); missing from a
        current store it is damage, refused rather than added empty (damage98)."""
        path = tmp_path / "s"
        _make_store(str(path))
        env = lmdb.open(str(path), max_dbs=16)
        with env.begin(write=True) as txn:
            txn.drop(env.open_db(b"audit_mac", txn=txn), delete=True)
        env.close()
        with pytest.raises(IntegrityError) as told:
            cpstore.open(path)
        assert told.value.expected == "audit_mac"


# -- read-only access -------------------------------------------------------------


def _nobody() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam("nobody")
    except KeyError:
        return 65534, 65534
    return entry.pw_uid, entry.pw_gid


def _unprivileged(fn: Callable[[], int]) -> tuple[int, str, str]:
    """Run ``fn`` in a forked child that cannot write the store; (its return, stdout, stderr).

    As root the child drops to ``nobody`` (root ignores file modes, so chmod
    alone proves nothing); otherwise the caller's own modes already deny it.
    fork rather than a new interpreter: ``nobody`` may not reach the Python
    installation (under /root here), while the forked image has it loaded.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child
            code = 99
            buf_out, buf_err = io.StringIO(), io.StringIO()
            try:
                if os.geteuid() == 0:
                    uid, gid = _nobody()
                    os.setgroups([])
                    os.setgid(gid)
                    os.setuid(uid)
                with contextlib.redirect_stdout(buf_out), contextlib.redirect_stderr(buf_err):
                    code = fn()
            except BaseException as exc:
                buf_err.write(f"{type(exc).__name__}: {exc}\n")
            finally:
                out.write(buf_out.getvalue().encode())
                err.write(buf_err.getvalue().encode())
                out.flush()
                err.flush()
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        out.seek(0)
        err.seek(0)
        return (
            os.waitstatus_to_exitcode(status),
            out.read().decode(),
            err.read().decode(),
        )


@pytest.fixture()
def unwritable_store() -> Iterator[tuple[str, str, str]]:
    """A store in a folder the test's child cannot write; (path, first id, head id)."""
    root = tempfile.mkdtemp(prefix="cpstore-ro-")
    try:
        os.chmod(root, 0o755)  # reachable by the unprivileged child
        path = os.path.join(root, "s")
        first, head = _make_store(path)
        if os.geteuid() != 0:
            for name in os.listdir(path):
                os.chmod(os.path.join(path, name), 0o444)
            os.chmod(path, 0o555)
        yield path, first, head
    finally:
        for dirpath, _, _ in os.walk(root):
            os.chmod(dirpath, 0o755)
        shutil.rmtree(root)


class TestReadOnlyAccess:
    def test_the_child_really_cannot_write_the_store(
        self, unwritable_store: tuple[str, str, str]
    ) -> None:
        """The test's premise: the unprivileged child is denied writing the lock file."""
        path = unwritable_store[0]

        def try_write() -> int:
            try:
                with open(os.path.join(path, "lock.mdb"), "r+b"):
                    return 1
            except PermissionError:
                return 0

        assert _unprivileged(try_write)[0] == 0

    @pytest.mark.parametrize(
        "command",
        [
            ["verify"],
            ["log"],
            ["log", "run-a"],
            ["inspect", "{head}"],
            ["stats"],
            ["validate", "{first}", "{head}", "--no-record"],
            ["validate", "{head}", "{head}", "--no-record"],
        ],
        ids=["verify", "log", "log-run", "inspect", "stats", "validate-reject", "validate-accept"],
    )
    def test_read_only_commands_read_a_store_the_user_cannot_write(
        self, unwritable_store: tuple[str, str, str], command: list[str]
    ) -> None:
        """verify, log, inspect, stats, validate --no-record: the code a writer would get."""
        path, first, head = unwritable_store
        argv = [a.format(first=first, head=head) for a in command] + ["--store", path]
        before = {n: os.stat(os.path.join(path, n)).st_mtime_ns for n in os.listdir(path)}
        code, out, err = _unprivileged(lambda: cli.main(argv))
        assert code in (0, cli.EXIT_REJECT, cli.EXIT_QUARANTINE), err
        assert err == "" and out
        after = {n: os.stat(os.path.join(path, n)).st_mtime_ns for n in os.listdir(path)}
        assert after == before
        assert code == _cli(argv)[0]  # what a user who may write gets

    def test_reads_without_the_lock_file_hand_out_copies_not_views(
        self, unwritable_store: tuple[str, str, str]
    ) -> None:
        """Without a reader slot a writer may reuse the pages under a read: every value a
        read txn hands out is then a copy, so what is hashed is what is decoded."""
        path, _, head = unwritable_store

        def read() -> int:
            with cpstore.open(path, readonly=True) as store:
                env = store.backend.env
                txn = env.begin_read()
                try:
                    with txn.cursor(db=store.backend.db("heap")) as cur:
                        kinds = {type(value) for _, value in cur}
                finally:
                    env.end_read(txn)
                with store.read(head) as cp:
                    ok = cp.state() == {"memory": "hello again"}
                return 0 if kinds == {bytes} and ok and not env.locked else 1

        code, _, err = _unprivileged(read)
        assert code == 0, err
        with cpstore.open(path, readonly=True) as store:  # with the lock file: views
            env = store.backend.env
            txn = env.begin_read()
            try:
                with txn.cursor(db=store.backend.db("heap")) as cur:
                    assert {type(value) for _, value in cur} == {memoryview}
            finally:
                env.end_read(txn)

    def test_the_api_reads_and_verifies_without_the_lock_file(
        self, unwritable_store: tuple[str, str, str]
    ) -> None:
        """cpstore.open(readonly=True) reads state and verifies clean; a write is refused."""
        path, _, head = unwritable_store

        def read() -> int:
            with cpstore.open(path, readonly=True) as store, store.read(head) as cp:
                assert cp.state() == {"memory": "hello again"}
                assert store.verify().ok
                assert not store.backend.env.locked
                try:
                    store.put_object(b"x")
                except StoreReadOnlyError:
                    return 0
                return 1

        code, _, err = _unprivileged(read)
        assert code == 0, err

    def test_a_write_on_a_store_the_user_cannot_write_is_one_line(
        self, unwritable_store: tuple[str, str, str]
    ) -> None:
        """validate that would record fails with one line, not a traceback, and changes nothing."""
        path, _, head = unwritable_store
        code, _, err = _unprivileged(
            lambda: cli.main(["validate", head, head, "--store", path, "--record"])
        )
        assert code not in (0, 99) and len(err.splitlines()) == 1, err
        assert "cannot be written" in err

    def test_a_store_the_user_cannot_read_says_so_in_one_line(
        self, unwritable_store: tuple[str, str, str]
    ) -> None:
        """A data file this user may not read is 'cannot be read', not 'cannot be written'."""
        path = unwritable_store[0]
        data = os.path.join(path, "data.mdb")
        mode = os.stat(data).st_mode
        os.chmod(data, 0o600 if os.geteuid() == 0 else 0)
        try:
            code, _, err = _unprivileged(lambda: cli.main(["verify", "--store", path]))
        finally:
            os.chmod(data, mode)
        assert code not in (0, 99) and len(err.splitlines()) == 1, err
        assert "cannot be read" in err and "data.mdb" in err

    def test_a_readonly_open_uses_the_lock_file_when_it_can(self, tmp_path: Path) -> None:
        """Where the lock file is writable, a read-only open keeps LMDB's reader coordination."""
        _make_store(str(tmp_path / "s"))
        with cpstore.open(tmp_path / "s", readonly=True) as store:
            assert store.backend.env.locked


class TestReadOnlyAcrossAnUpgrade:
    def test_a_read_only_handle_on_layout_1_reads_refs_after_another_process_upgrades(
        self, tmp_path: Path
    ) -> None:
        """A read-only handle opened on layout 1 still resolves refs after a concurrent upgrade."""
        path = tmp_path / "s"
        ids = _make_v1(path)
        with cpstore.open(path, readonly=True) as ro:
            assert ro.backend.env.layout == 1
            assert ro.ref("r") == ids[2]
            upgrade = "import sys, cpstore; cpstore.open(sys.argv[1]).close()"
            subprocess.run([sys.executable, "-c", upgrade, str(path)], check=True, timeout=60)
            with ro.backend.read_txn() as txn:  # the other process did upgrade the store
                fmt = txn.get(b"format", db=ro.backend.db("meta"))
                assert fmt is not None and decode_value(fmt)["version"] == STORE_VERSION
            assert ro.ref("r") == ids[2]
            assert ro.branches("r") == {"main": ids[2], "side": ids[0]}
            assert ro.runs() == ["r"]
            with ro.latest("r") as cp:
                assert cp.id == ids[2]
            report = ro.verify()
            assert report.ok, report.problems


def test_a_store_whose_last_txn_freed_its_tail_pages_opens_again(tmp_path: Path) -> None:
    """gc of large chunked states leaves freed, never written pages at the end: it opens."""
    path = str(tmp_path / "s")
    with cpstore.open(path) as store:
        rec = store.recorder("big")
        for i in range(40):
            rec.checkpoint(i, {"i": i, "blob": os.urandom(30_000)})
        store.gc(keep_last=1)
        head = store.ref("big")
    with cpstore.open(path, readonly=True, create=False) as store:
        assert store.ref("big") == head
        assert store.verify().ok


_UNCOVERED_WRITER = """
import os, sys
import cpstore
from cpstore.store.lmdb_env import Env
Env._cover_tail = lambda self: None  # killed between commit and fallocate / an older build
attempt = int(sys.argv[2])
with cpstore.open(sys.argv[1]) as store:
    rec = store.recorder("big")
    for i in range(40 * attempt, 40 * attempt + 40):
        rec.checkpoint(i, {"i": i, "blob": os.urandom(30_000)})
    store.gc(keep_last=1)
    print(store.ref("big"))
"""


def test_a_store_whose_writer_never_covered_its_tail_still_opens(tmp_path: Path) -> None:
    """Unwritten loose tail pages (writer killed before _cover_tail, older build): still opens."""
    for attempt in range(20):  # gc leaves loose tail pages in most fresh stores, not all
        path = tmp_path / f"s{attempt}"  # a fresh store: an older one may reuse its free pages
        out = subprocess.run(
            [sys.executable, "-c", _UNCOVERED_WRITER, str(path), str(attempt)],
            check=True,
            capture_output=True,
            text=True,
            timeout=120,
        )
        head = out.stdout.strip()
        env = lmdb.open(str(path), readonly=True, lock=False)
        info, psize = env.info(), env.stat()["psize"]
        needed = (info["last_pgno"] + 1) * psize
        env.close()
        if (path / "data.mdb").stat().st_size < needed:
            break
    assert (path / "data.mdb").stat().st_size < needed  # the state the check must accept
    # A commit of another process overtaking the walk (the meta page moved on) is walked again.
    answers = [{**info, "last_txnid": info["last_txnid"] - 1}, info, info, info]
    check_data_size(str(path / "data.mdb"), psize, lambda: answers.pop(0))
    with cpstore.open(str(path), readonly=True, create=False) as store:
        assert store.ref("big") == head
        assert store.verify().ok
    with cpstore.open(str(path)):
        pass
    assert (path / "data.mdb").stat().st_size >= needed  # a writable open covered the tail
    with cpstore.open(str(path)) as store:
        store.recorder("other").checkpoint(0, {"x": 1})
        assert store.verify().ok


def test_a_data_file_cut_inside_its_reachable_pages_is_still_refused(tmp_path: Path) -> None:
    """The walk that accepts an unwritten free tail still refuses a cut through live pages."""
    path = tmp_path / "s"
    with cpstore.open(str(path)) as store:
        rec = store.recorder("r")
        for i in range(20):
            rec.checkpoint(i, {"i": i, "blob": os.urandom(20_000)})
    data = path / "data.mdb"
    env = lmdb.open(str(path), readonly=True, lock=False)
    info, psize = env.info(), env.stat()["psize"]
    env.close()
    top = highest_reachable_page(str(data), psize, info["last_pgno"], info["last_txnid"])
    assert top is not None and top > 1
    raw = data.read_bytes()
    data.write_bytes(raw[: top * psize])  # the highest page the last txn reaches is cut
    with pytest.raises(IntegrityError, match="shorter than its last committed page"):
        cpstore.open(str(path), readonly=True, create=False)


def test_a_failing_tail_allocation_does_not_fail_a_committed_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Filling the tail failing (a full disk) fails no write, and what was stored reads back."""
    calls: list[int] = []

    def full(fd: int, data: bytes, offset: int) -> int:
        calls.append(len(data))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)  # TailCover writes zeros past the end
    for attempt in range(20):  # gc leaves loose tail pages in most fresh stores, not all
        path = str(tmp_path / f"s{attempt}")
        acknowledged: list[str] = []
        with cpstore.open(path) as store:
            rec = store.recorder("big")
            for step in range(41):
                acknowledged.append(rec.checkpoint(step, {"blob": os.urandom(30_000)}))
                if step == 39:
                    store.gc(keep_last=1)  # the write after it finds the tail short
        if calls:
            break
    with cpstore.open(path) as store:
        assert calls  # the tail really was left uncovered and allocation was tried
        assert store.ref("big") == acknowledged[-1]
    with cpstore.open(path, readonly=True, create=False) as store:
        assert store.ref("big") == acknowledged[-1]
        assert store.verify().ok


def test_the_tail_is_filled_inside_the_write_txn_before_its_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tail is filled holding LMDB's writer lock (inside the txn), never after a commit.

    The tail is filled by writing zeros past the end (as glibc emulates
    posix_fallocate where a filesystem lacks fallocate); after the commit, another
    process's commit could be reusing those pages.
    """
    from cpstore.store.lmdb_env import Env  # noqa: PLC0415 - patched below

    events: list[str] = []
    real = Env._cover_tail

    def cover(self: Env) -> None:
        events.append("cover")
        real(self)

    monkeypatch.setattr(Env, "_cover_tail", cover)
    with cpstore.open(str(tmp_path / "s")) as store:
        events.clear()
        store.backend.write_txn(lambda txn: events.append("work"))
    assert events == ["cover", "work"]


def test_a_short_size_seen_at_open_is_read_again_not_trusted(tmp_path: Path) -> None:
    """check_data_size's ``seen`` (the open's stat) only skips a stat: a short one is re-read."""
    path = tmp_path / "s"
    with cpstore.open(str(path)) as store:
        store.recorder("r").checkpoint(0, {"blob": os.urandom(20_000)})
    data = path / "data.mdb"
    env = lmdb.open(str(path), readonly=True, lock=False)
    info, psize = env.info(), env.stat()["psize"]
    env.close()
    check_data_size(str(data), psize, lambda: info, seen=0)  # the file itself is whole
    top = highest_reachable_page(str(data), psize, info["last_pgno"], info["last_txnid"])
    assert top is not None and top > 1
    data.write_bytes(data.read_bytes()[: top * psize])
    with pytest.raises(IntegrityError, match="shorter than its last committed page"):
        check_data_size(str(data), psize, lambda: info, seen=psize)
