"""docs67: claims README.md and docs/ gained since 2026-12-03, run against the code.

Each test pins one claim no test ran yet (the others were found already pinned: see
the docs67 report). One claim was wrong: docs/store.md said a ref that vanished or was
changed outside cpstore is mended by a ``fork`` or ``reset_ref`` to its true head ("each
move XORs the digest back to true"); a move XORs out the value it finds, so the digest
stayed wrong and retention stayed stopped. The doc now names ``repair_ref``, which
does mend it (``test_a_ref_changed_or_vanished_outside_cpstore_is_mended_by_repair_ref``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psycopg
import pytest
from audit_damage import flip_time
from pg_cluster import Cluster, backend_url, fresh_url, pg_cluster  # noqa: F401 - fixtures
from test_audit52_lg_rerecord import _rejected_thread
from test_audit63_retention_digest import _raw_ref
from test_decision_support import stored_replay

import cpstore
from cpstore import cli
from cpstore.cli.exit_codes import EXIT_INTEGRITY, EXIT_UNAVAILABLE
from cpstore.decision.gates import check_resume, resume_gate, sign_off
from cpstore.decision.table import Verdict
from cpstore.decision.validate import validate
from cpstore.errors import (
    AuditChainError,
    GateError,
    IntegrityError,
    NotFoundError,
    OutcomeUnknownError,
    ServerVersionError,
    StoreError,
)
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph.saver import _settled
from cpstore.run.model import ReplayMode
from cpstore.store import pg_open
from cpstore.store.audit import DECISION_PREFIX
from cpstore.store.audit_named import AUDITED_PREFIX
from cpstore.store.facade import Store
from cpstore.store.pg_open import parse_url
from cpstore.store.refs import RECORDED, REFS_DIGEST_KEY, pack_ref

ROOT = Path(__file__).resolve().parent.parent


def _problems(st: Store) -> list[str]:
    return [p.what for p in st.verify().problems]


# -- docs/store.md, "Repairing a damaged ref" ------------------------------------------


@pytest.mark.parametrize("damage", ["changed", "vanished"])
def test_a_ref_changed_or_vanished_outside_cpstore_is_mended_by_repair_ref(
    url: str, damage: str
) -> None:
    """docs/store.md, "Repairing a damaged ref": "A ref changed outside cpstore (put back
    to an older head) is mended the same way, `repair_ref` naming it and its true head
    ...". It said the move alone mended it ("each move XORs the digest back to true"):
    the digest stayed wrong. A vanished ref is no longer put back with `fork` (no ref is
    created from nothing while the table is short of its count, refs70): repair_ref puts
    it back."""
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        key = b"r\0main"
        if damage == "changed":
            _raw_ref(url, key, pack_ref(key, bytes.fromhex(ids[0]), RECORDED))
            st.reset_ref("r", "main", ids[2], expected_old=ids[0], operator="o", reason="x")
        else:
            _raw_ref(url, key, None)
            with pytest.raises(IntegrityError, match="fewer refs"):
                st.fork("r", "main", ids[2])
            assert st.ref("r") is None
        # the damage alone, or with a move: the table fails its digest, retention stops
        assert len(_problems(st)) == 1 and "refs table" in _problems(st)[0]
        with pytest.raises(IntegrityError) as info:
            st.prune(keep_last=1)
        assert info.value.where == "meta/refs_digest"
        record = st.repair_ref("r", "main", ids[2], operator="o", reason="put back")
        assert record.kind == "ref_repair"
        assert _problems(st) == []
        assert st.ref("r") == ids[2]
        st.prune(keep_last=1)
        with st.read(ids[2]) as cp:
            assert cp.state() == {"i": 2}
        assert st.verify().ok


def test_a_flipped_refs_digest_stops_retention_but_no_ref_move(url: str) -> None:
    """docs/store.md, "Repairing a damaged ref": "a damaged `meta/refs_digest` (flipped:
    it stops retention; malformed: every ref move)". A flipped one leaves checkpoints,
    forks and resets working (each moves the digest by XOR), sweeps refused."""
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(2)]
        with st.backend.read_txn() as txn:
            good = bytes(txn.get(REFS_DIGEST_KEY, None, st.backend.db("meta")))
        _raw_ref(url, REFS_DIGEST_KEY, bytes([good[0] ^ 1]) + good[1:], "meta")
        ids.append(rec.checkpoint(2, {"i": 2}))
        st.fork("r", "b", ids[0])
        st.reset_ref("r", "b", ids[1], expected_old=ids[0], operator="o", reason="x")
        assert st.ref("r") == ids[2] and st.ref("r", "b") == ids[1]
        for sweep in (
            lambda: st.prune(keep_last=1),
            lambda: st.gc(keep_last=1),
            lambda: st.delete_run("r"),
        ):
            with pytest.raises(IntegrityError) as info:
                sweep()
            assert info.value.where == "meta/refs_digest"
        for cid in ids:
            with st.read(cid) as cp:
                cp.state()


# -- docs/store.md, "Engine differences" --------------------------------------------


def test_lmdb_refuses_a_writable_open_beside_a_readonly_handle(tmp_path: Path) -> None:
    """docs/store.md, "Engine differences": "a `readonly=True` open beside a writable
    handle (or the other way round) is `StoreError` "already open in this process with
    another mode"". test_audit65_engine_differences pins the first order only."""
    path = str(tmp_path / "s")
    cpstore.open(path).close()
    with cpstore.open(path, readonly=True), pytest.raises(StoreError) as info:
        cpstore.open(path)
    assert "another mode" in info.value.what and info.value.where == path


# -- docs/store.md, "Server version"; README's exit-code table ---------------------


def test_an_older_server_is_exit_7_on_the_command_line_before_anything_is_made(
    pg_cluster: Cluster,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/store.md, "Server version": "older than 14.0 is `ServerVersionError` (a
    `StoreError`, exit 7 ...) before anything is created or read"; README's table: exit 7
    "server ... older than PostgreSQL 14". The real 15 server against a limit raised to
    16 (as test_pg_server_version): a reading command, a readonly open and a push into a
    new schema are refused, one line on stderr, and the push made no schema."""
    existing = fresh_url()
    with cpstore.open(existing) as st:
        st.recorder("r").checkpoint(0, {"a": 1})
    source = str(tmp_path / "src")
    with cpstore.open(source) as st:
        st.recorder("r").checkpoint(0, {"a": 1})
    dest = fresh_url()
    monkeypatch.setattr(pg_open, "MIN_SERVER_VERSION", 160000)
    with pytest.raises(ServerVersionError):
        cpstore.open(existing, readonly=True)
    for argv in (["log", "--store", existing], ["push", dest, "--store", source]):
        code = cli.main(argv)
        _, err = capsys.readouterr()
        assert code == EXIT_UNAVAILABLE, (argv, err)
        assert "older than cpstore supports" in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1, err
    schema = dest.rpartition("schema=")[2]
    with psycopg.connect(
        f"host={pg_cluster.socket_dir} user=postgres dbname=postgres", autocommit=True
    ) as conn:
        made = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone()
    assert made is None


# -- docs/langgraph.md, the async saver's cancellation ------------------------------


def test_under_asyncio_timeout_the_noted_cancellation_is_the_timeouts_cause() -> None:
    """docs/langgraph.md: "its error is in the `CancelledError`'s notes (`__notes__`; under
    `asyncio.timeout`, that `CancelledError` is the `TimeoutError`'s `__cause__`)". A call
    timed out while it runs and then failing: the TimeoutError's cause carries the note."""
    started, release = threading.Event(), threading.Event()

    def fails() -> None:
        started.set()
        release.wait(10)
        raise OutcomeUnknownError("the commit's outcome is unknown", where="test")

    async def fire(cm: asyncio.Timeout) -> None:
        while not started.is_set():  # the call runs in its thread: time out now
            await asyncio.sleep(0.001)
        loop = asyncio.get_running_loop()
        cm.reschedule(loop.time())
        loop.call_later(0.05, release.set)  # then it fails, after the cancellation

    async def main() -> BaseException | None:
        try:
            async with asyncio.timeout(None) as cm:
                helper = asyncio.ensure_future(fire(cm))
                await _settled(fails)
        except TimeoutError as exc:
            await helper
            return exc.__cause__
        raise AssertionError("no TimeoutError")

    cause = asyncio.run(main())
    assert started.is_set()
    assert isinstance(cause, asyncio.CancelledError)
    notes = list(getattr(cause, "__notes__", []))
    assert len(notes) == 1 and "OutcomeUnknownError" in notes[0], notes


# -- docs/security.md, a deleted decision-index entry ------------------------------


@pytest.fixture
def store(url: str) -> Iterator[Store]:
    with cpstore.open(url) as st:
        yield st


def _checkpoint(st: Store, run: str) -> str:
    rec = st.recorder(run)
    rec.observe(1, "clock", b"t", pinned_at=1.0)
    rec.token("rng", 1)
    return str(rec.checkpoint(1, {"run": run}))


def test_a_deleted_entry_of_a_checkpoint_first_named_as_a_replayed_side_reads_no_decision(
    store: Store,
) -> None:
    """docs/security.md: "a checkpoint first named otherwise (as a replayed side, by a
    retention record) ... reads "no decision" until `verify()` reports both entries"
    (here: the decision entry; its `audited/<id>` entry names the other's decision). The
    documented limit: its QUARANTINE then stops no recorder."""
    a, b = _checkpoint(store, "a"), _checkpoint(store, "b")
    validate(a, b, store=store)  # names b first, as the replayed side
    with store.backend.read_txn() as txn:
        assert txn.get(AUDITED_PREFIX + bytes.fromhex(b), None, store.backend.db("meta"))
    d = validate(b, stored_replay(store, b, mode=ReplayMode.BEST_EFFORT), store=store)
    assert d.verdict is Verdict.QUARANTINE
    meta = store.backend.dbs["meta"]
    store.backend.write_txn(lambda t: t.delete(DECISION_PREFIX + bytes.fromhex(b), db=meta))
    with store.audit_view() as log:
        assert log.latest_decision(b) is None
    check_resume(store, b, run_id="b", branch="main")  # no decision: not refused
    wheres = {p.where for p in store.verify().problems}
    assert f"meta/decision/{b}" in wheres


def test_a_deleted_source_entry_stops_a_push_before_anything_lands(
    url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/security.md: "A push or pull asks the same of each checkpoint it carries that
    has either entry, so a deleted source entry stops it with `AuditChainError` before
    anything lands" (store.md, "Decisions carried": "a source checkpoint whose decision
    entry was deleted"). test_audit62_transfer_rows allows "refused, or carried"; here
    the refusal, exit 5, and a destination left without the checkpoint or a log record."""
    dest = str(tmp_path / "dest")
    with cpstore.open(url) as src:
        cid = _checkpoint(src, "r")
        validate(cid, stored_replay(src, cid, mode=ReplayMode.BEST_EFFORT), store=src)
        meta = src.backend.dbs["meta"]
        src.backend.write_txn(lambda t: t.delete(DECISION_PREFIX + bytes.fromhex(cid), db=meta))
    code = cli.main(["push", dest, "--store", url])
    _, err = capsys.readouterr()
    assert code == EXIT_INTEGRITY, err
    assert f"meta/decision/{cid}" in err
    with cpstore.open(dest) as dst:
        assert dst.ref("r") is None
        with pytest.raises(NotFoundError):
            dst.manifest(cid)
        assert list(dst.audit_records()) == []
        assert dst.verify().ok


# -- docs/decision-table.md, "the chain vouches for it" -----------------------------


@pytest.mark.parametrize("last", [False, True], ids=["middle", "last"])
def test_an_altered_resume_permit_lets_no_recorder_on(store: Store, last: bool) -> None:
    """docs/decision-table.md: "a record altered in place that still decodes is an
    `AuditChainError` ...; each sign-off, permit and standing decision they use is checked
    the same way". test_audit62_altered_record alters a decision and a sign-off; here the
    permit (`resume_gate`'s gate record) that `Store.recorder` spends: refused, unspent."""
    cid = _checkpoint(store, "r")
    d = validate(cid, stored_replay(store, cid, mode=ReplayMode.BEST_EFFORT), store=store)
    so = sign_off(store, d, operator="op", reason="drill")
    permit = resume_gate(store, cid, d.id, sign_off=so.audit_digest)
    if not last:
        other = _checkpoint(store, "o")
        validate(other, stored_replay(store, other), store=store)
    index = next(r.index for r in store.audit_records(kind="gate"))
    n = len(list(store.audit_records()))
    flip_time(store, index)
    with pytest.raises(AuditChainError):
        store.recorder("r", permit=permit)
    assert len(list(store.audit_records())) == n  # no resume record: nothing spent


def test_a_call_cancelled_before_an_executor_thread_took_it_never_runs() -> None:
    """docs/langgraph.md: "A cancelled async call is settled when its `CancelledError` is
    raised: cancelled before an executor thread took it, the store work never runs". The
    loop's one executor thread is busy; the queued call is cancelled, the thread freed:
    the call never runs, and the CancelledError comes at once (nothing to wait for)."""
    busy, free = threading.Event(), threading.Event()
    ran: list[str] = []

    def block() -> None:
        busy.set()
        free.wait(10)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(ThreadPoolExecutor(max_workers=1))
        blocker = loop.run_in_executor(None, block)
        while not busy.is_set():  # the one thread is taken by the blocker
            await asyncio.sleep(0.001)
        task = asyncio.ensure_future(_settled(lambda: ran.append("ran")))
        await asyncio.sleep(0.05)  # the call is queued, no thread has taken it
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        free.set()
        await blocker
        await loop.run_in_executor(None, lambda: None)  # the queue has drained

    asyncio.run(main())
    assert ran == []


def test_a_digest_repair_through_another_branch_keeps_a_vanished_ref_history(url: str) -> None:
    """docs/store.md, "Repairing a damaged ref": a repair naming another branch "keeps
    what the repaired table no longer reaches as retained heads (`kept`)". It used to
    accept the table as it stood: the vanished ref was forgotten and the next sweep
    removed its run's history, `verify()` clean (orphan68)."""
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        other = st.recorder("s").checkpoint(0, {"s": 1})
        _raw_ref(url, b"r\0main", None)
        record = st.repair_ref(
            "s", "main", other, operator="o", reason="clear the digest", force=True
        )
        assert record.kind == "ref_repair" and record.body["run"] == "s"
        assert st.verify().ok  # the table is accepted as it stands...
        assert record.body["kept"] == [ids[2]]  # ...and the vanished head kept
        assert st.retained()[ids[2]]["run"] == "r"
        assert st.prune(keep_last=1) == 0
        for i, cid in enumerate(ids):
            with st.read(cid) as cp:
                assert cp.state() == {"i": i}
        assert [r.body["run"] for r in st.audit_records(kind="ref_repair")] == ["s"]
        # the record says what was accepted: the digest recorded 2 refs, the table held 1
        assert record.body["refs"] == {"recorded": 2, "found": 1}


def test_gc_on_the_command_line_stops_at_a_ref_put_back_exit_5(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """docs/store.md, "Retention": "a ref that vanished, was added or was changed outside
    cpstore (a ref put back to an older head keeps a true check; only the digest tells)
    stops the sweep with `IntegrityError` (`where`: `meta/refs_digest`)"; README: exit 5.
    test_audit63_ref_damage runs `cpstore gc` on a flipped ref only: here a ref with a
    true check, `gc` and `gc --dry-run` exit 5 naming the digest, nothing swept."""
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
    key = b"r\0main"
    _raw_ref(url, key, pack_ref(key, bytes.fromhex(ids[0]), RECORDED))
    for extra in ([], ["--dry-run"]):
        code = cli.main(["gc", "--keep-last", "1", *extra, "--store", url])
        _, err = capsys.readouterr()
        assert code == EXIT_INTEGRITY, err
        assert "meta/refs_digest" in err and len(err.strip().splitlines()) == 1, err
    with cpstore.open(url) as st:
        for cid in ids:
            with st.read(cid) as cp:
                cp.state()


def test_an_entry_rewound_to_an_older_accept_fools_the_gates_until_verify(
    store: Store,
) -> None:
    """docs/security.md: "someone who can write `data.mdb` and rewinds an entry to an older
    ACCEPT fools the gates and `store.recorder` until `verify()` reports "decision index
    disagrees with the audit log"" (decision-table.md, "Not enforced"). The documented
    limit the audit62 checks leave: the older record is a decision about the checkpoint
    the chain vouches for, so the lookup takes it."""
    cid = _checkpoint(store, "r")
    validate(cid, stored_replay(store, cid), store=store)  # ACCEPT, record 0
    meta, key = store.backend.dbs["meta"], DECISION_PREFIX + bytes.fromhex(cid)
    with store.backend.read_txn() as txn:
        accept_row = bytes(txn.get(key, None, meta))
    d = validate(cid, stored_replay(store, cid, mode=ReplayMode.BEST_EFFORT), store=store)
    assert d.verdict is Verdict.QUARANTINE
    with pytest.raises(GateError):
        store.recorder("r")
    store.backend.write_txn(lambda t: t.put(key, accept_row, db=meta))
    with store.audit_view() as log:
        latest = log.latest_decision(cid)
        assert latest is not None and latest.body["verdict"] == "ACCEPT"
    store.recorder("r").close()  # fooled: no permit asked
    problems = [(p.what, p.where) for p in store.verify().problems]
    assert ("decision index disagrees with the audit log", f"meta/decision/{cid}") in problems


_HOLD = r"""
import sys
import cpstore
st = cpstore.open(sys.argv[1])
def hold(txn):
    txn.begin_now()  # BEGIN and the advisory writer lock
    print("held", flush=True)
    sys.stdin.readline()
st.backend.write_txn(hold)
st.close()
"""


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_ends_a_postgresql_command_waiting_for_the_writer_lock_exit_130(
    pg_cluster: Cluster,  # noqa: F811
) -> None:
    """docs/reliability.md: "Ctrl-C does not stop an LMDB command ... that waits for the
    store's writer lock another process holds ... On PostgreSQL the same wait is
    interrupted (exit 130, "interrupted")". `cpstore gc` waits behind another process's
    write (its advisory lock seen waiting in pg_locks), SIGINT: exit 130, nothing swept."""
    url = fresh_url()
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, url],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        gc = subprocess.Popen(
            [sys.executable, "-m", "cpstore.cli", "gc", "--keep-last", "1", "--store", url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            # As from a terminal: a suite run as a background job (a shell's `cmd &`)
            # inherits SIGINT ignored, and Python then keeps ignoring it (CI, twice).
            preexec_fn=_default_sigint,  # noqa: PLW1509 - one thread forks here
        )
        with psycopg.connect(
            f"host={pg_cluster.socket_dir} user=postgres dbname=postgres", autocommit=True
        ) as conn:
            waiting = 0
            # The gc's request for THIS store's writer lock, once it waits (the cluster is
            # the suite's: counting every ungranted advisory lock let another test's
            # leftover waiter send the SIGINT before the gc reached its wait; CI, once).
            key = pg_open.lock_key(pg_open.parse_url(url).schema)
            for _ in range(600):
                row = conn.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
                    " AND objsubid = 1 AND ((classid::bigint << 32) | objid::bigint) = %s",
                    (key,),
                ).fetchone()
                waiting = 0 if row is None else int(row[0])
                if waiting or gc.poll() is not None:
                    break
                threading.Event().wait(0.05)
            assert waiting == 1, gc.communicate()
        gc.send_signal(signal.SIGINT)
        _, err = gc.communicate(timeout=60)
        assert gc.returncode == 130, err
        assert err.strip() == "cpstore gc: interrupted", err
    finally:
        assert holder.stdin is not None
        holder.stdin.write("go\n")
        holder.stdin.flush()
        holder.wait(timeout=60)
    with cpstore.open(url) as st:
        for cid in ids:
            with st.read(cid) as cp:
                cp.state()
        assert st.verify().ok


def test_a_damaged_key_is_repaired_by_dropping_it_and_setting_the_true_branch(
    url: str,
) -> None:
    """docs/store.md, "Repairing a damaged ref": "A damaged *key* shows in `verify` under
    the name it now decodes to; repair that name with `new=None`, then `set_ref`/`reset_ref`
    the true branch again." test_audit63_ref_damage shows the damage; here the repair: the
    store verifies clean, retention runs again and keeps the branch's history."""
    old, new = b"r\0main", b"r\0maio"  # one bit: 'n' ^ 0x01 == 'o'
    with cpstore.open(url) as st:
        rec = st.recorder("r")
        ids = [rec.checkpoint(i, {"i": i}) for i in range(3)]
        rec.close()
        with st.backend.read_txn() as txn:
            value = bytes(txn.get(old, None, st.backend.db("refs")))
        _raw_ref(url, old, None)
        if url.startswith("postgresql"):
            schema = parse_url(url).schema
            with psycopg.connect(parse_url(url).conninfo, autocommit=True) as conn:
                conn.execute(f'INSERT INTO "{schema}"."refs" (k, v) VALUES (%s, %s)', (new, value))
        else:
            _raw_ref(url, new, value)  # an LMDB put inserts
        assert any(p.where == "refs/r/maio" for p in st.verify().problems)
        record = st.repair_ref("r", "maio", None, operator="o", reason="damaged key")
        assert record.body["new"] is None and record.body["retained"] == ids[2]
        st.set_ref("r", "main", ids[2], expected_old=None)
        assert st.verify().ok, st.verify().problems
        assert st.prune(keep_last=1) == 0  # the damaged value's head is kept, retained
        st.release_retained(ids[2], operator="o", reason="set again")
        assert st.prune(keep_last=1) == 2
        with st.read(ids[2]) as cp:
            assert cp.state() == {"i": 2}


@pytest.mark.parametrize("action", ["copy_thread", "keep_latest"])
def test_the_savers_maintenance_refuses_an_altered_standing_decision(url: str, action: str) -> None:
    """docs/store.md, "Decision index": "a standing decision altered in place that still
    decodes is an `AuditChainError` to every reader (the gates, `Store.recorder`, the
    LangGraph saver's maintenance, ...)". A thread whose head's REJECT was altered in
    place: `copy_thread` and `prune(keep_latest)` refuse, nothing recorded or dropped."""
    _, head = _rejected_thread(url)
    with CpstoreSaver.from_conn_string(url) as saver:
        flip_time(saver.store, 0)  # the REJECT, the log's one record
        with pytest.raises(AuditChainError):
            if action == "copy_thread":
                saver.copy_thread("t", "t2")
            else:
                saver.prune(["t"], strategy="keep_latest")
        assert list(saver.list({"configurable": {"thread_id": "t2"}})) == []
        assert len(list(saver.list({"configurable": {"thread_id": "t"}}))) == 3
        assert list(saver.store.branches("lg:t").values()) == [head]
