"""The chaos test's wider roles (tests/test_chaos_mutations.py): the LangGraph saver, push/pull,
and a second batched writer thread.

* ``lg_*``: a :class:`~cpstore.langgraph.CpstoreSaver` on the worker's store
  (not in batched mode: the saver refuses it) puts a chain of checkpoints on a
  thread of its own (``lg-w<N>-<inc>``, run ``lg:<thread>``, branch ``main`` or a fork),
  puts task writes, reads them back (``get_tuple``, ``list``), deletes an older
  thread of its own and prunes one (``keep_latest``). Logged as ``lgput``
  (``run``/``branch``/``cid``/``vd``, the digest of the values put; ``branch`` the one
  the saver recorded on, read from its index entry: ``main@<id>`` for a fork), ``lgwrite``,
  ``lgdelete`` and ``lgprune`` (run ``lg:<thread>``; two steps each, so one
  that raised may still have removed the thread's entries).
* ``push``: :func:`~cpstore.store.transfer.transfer` of the worker's own run into
  the peer store (a second LMDB folder every worker shares); logged with ``src``,
  the own run's head read just before (only this thread moves it).
* ``pull``: one checkpoint recorded on the peer (run ``peer-w<N>-<inc>``, logged
  ``pckpt``), then that run pulled into the worker's store; the pulled head is
  logged as a ``ckpt`` of that run (one new checkpoint a pull, so retention's
  count holds), and the first failed pull ends pulls of the incarnation.
* :func:`damage_and_repair`: the operator (the test process) breaks a fork
  branch's ref check, lets the workers meet it, and repairs it;
  :func:`release_repair_hold` releases a hold such a repair made (by name when several
  records hold the head: holderless it must be SeveralHoldersError).
* :func:`batched_writer`: in batched mode, a second thread with its own recorder
  on ``own-w<N>t``, queueing checkpoints and flushing (a flush acknowledges).
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from typing import Any

from chaos_log import Log, log_escape, note_error
from chaos_worker import SHARED, Worker, shared_cas
from langgraph.checkpoint.base import empty_checkpoint

import cpstore
from cpstore.errors import (
    ConflictError,
    CpstoreError,
    NotFoundError,
    OutcomeUnknownError,
    StoreConnectionError,
)
from cpstore.langgraph import CpstoreSaver
from cpstore.langgraph._read import entry_at
from cpstore.store.transfer import transfer


def saver_branch(st: cpstore.Store, thread: str, checkpoint_id: str) -> str:
    """The cpstore branch the saver recorded ``checkpoint_id`` of ``thread`` on (its index
    entry says), or ``"?"`` when there is no entry."""
    backend = st.backend
    with backend.read_txn() as txn:
        entry = entry_at(txn, backend.db("meta"), thread, "", checkpoint_id)
    return "?" if entry is None else entry.branch


def values_digest(values: Any) -> str:
    """What the checker compares a get_tuple's channel values with."""
    return hashlib.sha256(repr(sorted(values.items())).encode()).hexdigest()[:32]


def list_problem(tuples: Any, puts: list[str], maybe: dict[str, str]) -> str | None:
    """What is wrong with a saver ``list`` of one's own thread, newest first: a listed id
    must be an acknowledged put (``puts``) or one whose outcome was unknown (``maybe``, id ->
    values digest), which then landed whole, with the values put."""
    got = [(t.checkpoint["id"], values_digest(t.checkpoint["channel_values"])) for t in tuples]
    listed = [cid for cid, _ in got]
    wrong = [cid for cid, vd in got if cid not in puts and maybe.get(cid) != vd]
    if wrong or listed != sorted(listed, reverse=True):
        return f"list named {listed}; not put (or with other values): {wrong}"
    return None


class Roles:
    """One worker's saver, peer store and their state."""

    def __init__(self, inc: int, peer_path: str | None) -> None:
        self.inc, self.peer_path = inc, peer_path
        self.lg_head: str | None = None
        self.lg_puts: list[str] = []
        # Puts whose commit lost its connection (a server restart) or reported an unknown
        # outcome: each may have landed whole (docs/store.md, "Faults"). id -> values digest.
        self.lg_maybe: dict[str, str] = {}
        self.peer: cpstore.Store | None = None
        self.peer_rec: Any = None
        self.pull_broken = False

    def bind(self, w: Worker) -> None:
        """Work through ``w`` and its open store (the same incarnation's next session)."""
        self.w, self.saver = w, None if w.batched else CpstoreSaver(w.st)
        self.thread = f"lg-{w.name}-{self.inc}"
        if not hasattr(self, "lg_old"):
            self.lg_old = [f"lg-{w.name}-{i}" for i in range(self.inc)]  # older incarnations'
        self.peer_run = f"peer-{w.name}-{self.inc}"
        self.peer_rec = None

    # ---- the LangGraph saver --------------------------------------------------------
    def conf(self, cid: str | None, thread: str | None = None) -> dict[str, Any]:
        """A LangGraph config naming ``cid`` (or the newest) on this incarnation's thread."""
        c: dict[str, Any] = {"thread_id": thread or self.thread, "checkpoint_ns": ""}
        if cid is not None:
            c["checkpoint_id"] = cid
        return {"configurable": c}

    def lg_put(self) -> None:
        """put: the next checkpoint of the chain, from the head this incarnation put last."""
        if self.saver is None:
            return
        w, saver = self.w, self.saver
        n = len(self.lg_puts)
        cp = empty_checkpoint()
        size = w.rng.choice((16, 3000))
        cp["channel_values"] = {"doc": f"{w.name}-{self.inc}-{n}-" + "x" * size, "n": n}
        cp["channel_versions"] = {"doc": n + 1, "n": n + 1}
        vd = values_digest(cp["channel_values"])
        run = f"lg:{self.thread}"
        versions = {"doc": n + 1, "n": n + 1}

        def put() -> tuple[str, str]:
            got = saver.put(self.conf(self.lg_head), cp, {"step": n}, versions)
            return got["configurable"]["checkpoint_id"], saver_branch(w.st, self.thread, cp["id"])

        try:
            # branch None: the saver picks it (``main``, or ``main@<parent>`` when the parent
            # is not the head, e.g. after a put whose outcome was unknown landed); the ack
            # logs the one it recorded on (before, "main" always: the checker counted the
            # newer puts of main against a fork branch's checkpoint and over-excused).
            oid, (cid, branch) = w.call(
                "lgput", put, run=run, branch=None, parent=self.lg_head, vd=vd, cid=cp["id"],
            )  # fmt: skip
        except (StoreConnectionError, OutcomeUnknownError):
            self.lg_maybe[cp["id"]] = vd
            raise
        w.ack("lgput", oid, cid=cid, run=run, branch=branch, thread=self.thread, vd=vd)
        self.lg_head = cid
        self.lg_puts.append(cid)

    def lg_write(self) -> None:
        """put_writes on the head, then get_tuple must show them; list must name only puts."""
        if self.saver is None or self.lg_head is None:
            return
        w, saver, head = self.w, self.saver, self.lg_head
        task, value = f"t{w.counter}", f"v{w.rng.getrandbits(32)}"
        w.counter += 1
        oid, _ = w.call(
            "lgwrite",
            lambda: saver.put_writes(self.conf(head), [("doc", value)], task),
            thread=self.thread, cid=head,
        )  # fmt: skip
        w.ack("lgwrite", oid, thread=self.thread, cid=head, task=task, value=value)
        tup = saver.get_tuple(self.conf(head))
        if tup is None or (task, "doc", value) not in list(tup.pending_writes or []):
            why = f"an acknowledged put_writes is not read back: {head}"
            w.log.write("defect", sync=True, op="lgwrite", tb=why)
        wrong = list_problem(saver.list(self.conf(None), limit=4), self.lg_puts, self.lg_maybe)
        if wrong:
            w.log.write("defect", sync=True, op="lglist", tb=wrong)

    def lg_maintain(self) -> None:
        """delete_thread of an older incarnation's thread, or keep_latest prune of one."""
        if self.saver is None or not self.lg_old:
            return
        w, saver = self.w, self.saver
        thread = self.lg_old.pop(w.rng.randrange(len(self.lg_old)))
        if w.rng.random() < 0.5:
            oid, _ = w.call(
                "lgdelete",
                lambda: saver.delete_thread(thread),
                destructive=True,
                run=f"lg:{thread}",
            )
            w.ack("lgdelete", oid, run=f"lg:{thread}")
        else:
            oid, _ = w.call(
                "lgprune",
                lambda: saver.prune([thread], strategy="keep_latest"),
                destructive=True, run=f"lg:{thread}",
            )  # fmt: skip
            w.ack("lgprune", oid, run=f"lg:{thread}")

    # ---- push / pull ----------------------------------------------------------------
    def peer_store(self) -> cpstore.Store | None:
        """The peer store, opened once (sync) by this incarnation."""
        path = self.peer_path
        if self.peer is None and path is not None:
            _, self.peer = self.w.call("peer_open", lambda: cpstore.open(path))
        return self.peer

    def push(self) -> None:
        """Push the own run into the peer; the head read before must be there, verified."""
        peer, w = self.peer_store(), self.w
        if peer is None:
            return
        if w.main_pending:
            w.flush()
        src = w.st.ref(w.run)
        if src is None:
            return

        def push() -> int:
            try:
                return transfer(w.st.backend, peer.backend, run_id=w.run).checkpoints
            except ConflictError as exc:  # a fork branch reset here went elsewhere there
                # Only the collected conflict (every other branch landed, ``got`` the list
                # of those that did not) says main landed; one raised mid-transfer (a
                # branch moved or pruned there meanwhile) may have stopped before main.
                if exc.where != "refs" or not isinstance(exc.got, list):
                    raise
                if f"{w.run}/main" in exc.got:
                    raise
                return -1  # the other branches (main among them) landed

        oid, copied = w.call("push", push, run=w.run, src=src)
        w.ack("push", oid, run=w.run, src=src, copied=copied)
        if peer.verify_checkpoint(src):
            w.log.write(
                "defect", sync=True, op="push", tb=f"a pushed head fails in the peer: {src}"
            )

    def pull(self) -> None:
        """One checkpoint on the peer's run of this incarnation, then that run pulled here."""
        peer, w = self.peer_store(), self.w
        if peer is None or self.pull_broken:
            return
        if self.peer_rec is None:
            self.peer_rec = peer.recorder(self.peer_run)
        state, _ = w.state()
        sd, parent = cpstore.state_digest(state), self.peer_rec.head
        try:
            oid, cid = w.call(
                "pckpt", lambda: self.peer_rec.checkpoint(time.monotonic_ns() // 1000, state),
                run=self.peer_run, sd=sd,
            )  # fmt: skip
        except CpstoreError:
            self.pull_broken = True
            raise
        w.ack("pckpt", oid, run=self.peer_run, cid=cid, sd=sd)
        pulled = dict(run=self.peer_run, branch="main", parent=parent, sd=sd)
        try:
            oid, _ = w.call(
                "ckpt", lambda: transfer(peer.backend, w.st.backend, run_id=self.peer_run),
                pull=True, **pulled,
            )  # fmt: skip
        except CpstoreError:
            self.pull_broken = True  # the next pull would bring two: retention's count breaks
            raise
        w.ack("ckpt", oid, cid=cid, pull=True, **pulled)


def batched_writer(w: Worker, deadline: float, stop: threading.Event) -> None:
    """A second batched writer thread: its own run's checkpoints queued and flushed, shared CAS."""
    mine = Worker.__new__(Worker)
    mine.__dict__.update(w.__dict__)
    mine.rng = random.Random(w.rng.random())
    mine.name, mine.run = f"{w.name}t", f"own-{w.name}t"
    mine.main_pending, mine.acked_main, mine.blobs = [], [], []
    mine.forks, mine.retained, mine.tmp_runs, mine.pins = {}, [], [], []
    mine.main = None
    try:
        while time.monotonic() < deadline and not stop.is_set():
            try:
                if mine.main is None:  # a dropped batch took the recorder's head
                    mine.main = mine.fresh_main()
                pick = mine.rng.choices(("own", "flush", "shared", "audit"), (10, 3, 2, 1))[0]
                if pick == "own":
                    mine.op_own()
                elif pick == "flush":
                    mine.op_flush()
                elif pick == "shared":
                    if mine.main_pending:
                        mine.flush()
                    shared_cas(mine, 40, run=SHARED)
                else:
                    mine.op_audit()
            except CpstoreError as exc:
                # fresh_main (a read of the head) may fail too, e.g. on PostgreSQL while the
                # server restarts: raised in this handler, it ended the thread unlogged.
                mine.main = None
                note_error(mine.log, exc, "writer")
            time.sleep(mine.rng.random() * 0.01)
        if mine.main_pending:
            mine.flush()
    except CpstoreError as exc:  # the last flush: logged by its call
        note_error(mine.log, exc, "writer")
    except BaseException as exc:  # else the thread died with a traceback on stderr only
        log_escape(mine.log, exc, "writer")


def damage_and_repair(store: str, log: Log, rng: random.Random) -> None:
    """The operator: break the check of a fork branch's ref, let the workers meet it, repair it."""
    with cpstore.open(store) as st:
        forks = [
            (run, b)
            for run in st.runs()
            if run.startswith("own-")
            for b in st.branches(run)
            if b != "main"
        ]
        if not forks:
            return
        run, branch = rng.choice(forks)
        key, refs = f"{run}\0{branch}".encode(), st.backend.dbs["refs"]

        def flip(txn: Any) -> None:
            value = txn.get(key, db=refs)
            if value is not None:
                value = bytes(value)
                txn.put(key, value[:-1] + bytes([value[-1] ^ 1]), db=refs)

        oid = log.op()
        log.write("b", sync=True, op="damage", id=oid, run=run, branch=branch)
        st.backend.write_txn(flip)
        time.sleep(rng.uniform(0.05, 0.4))
        try:
            rec = st.repair_ref(run, branch, None, operator="chaos", reason="damaged")
        except (ConflictError, NotFoundError) as exc:  # the branch was gone before the flip
            log.write("x", sync=True, op="damage", id=oid, err=type(exc).__name__)
            return
        log.write("a", sync=True, op="damage", id=oid, digest=rec.digest, index=rec.index,
                  retained=rec.body["retained"], kept=rec.body["kept"])  # fmt: skip


def release_repair_hold(store: str, log: Log, rng: random.Random) -> None:
    """The operator releases a hold one of its fork repairs made (chaos69): when several
    records hold that head (a repair keeping a head a reset holds, holders69), first with
    no holder named, which must be SeveralHoldersError and release nothing, then naming
    its own record's digest, which must leave the others' holds standing. Half the time
    when some head is held twice, only that unnamed probe of it (one a worker's release
    left single meanwhile is released: its worker's own release then finds none). Logged
    as a worker's ``release`` is (``holder``; ``a``: ``left``, ``released``)."""
    with cpstore.open(store) as st:
        heads = st.retained()
        many = sorted(cid for cid, row in heads.items() if len(row["holds"]) > 1)
        if many and rng.random() < 0.5:  # a head held twice (a twin, a reset again): probe
            cid = rng.choice(many)
            first = heads[cid]["holds"][0]
            fields = {"run": first["run"], "branch": first["branch"], "cid": cid,
                      "home": st.manifest(cid).branch}  # fmt: skip
            _release(st, log, fields, None)  # refused, unless a release left one meanwhile
            return
        held = [
            (cid, h, len(row["holds"]))
            for cid, row in heads.items()
            for h in row["holds"]
            if h["branch"] != "main" and st.get_audit(h["audit"]).kind == "ref_repair"
        ]  # main: a rollback's repair, whose side chain the checker keeps (chaos_rollback)
        if not held:
            return
        cid, hold, n = rng.choice(sorted(held, key=lambda x: (x[0], x[1]["audit"])))
        fields = {"run": hold["run"], "branch": hold["branch"], "cid": cid,
                  "home": st.manifest(cid).branch}  # fmt: skip
        if (n > 1 or rng.random() < 0.3) and _release(st, log, fields, None):
            return
        _release(st, log, fields, hold["audit"])


def _release(st: cpstore.Store, log: Log, fields: dict[str, Any], holder: str | None) -> bool:
    oid = log.op()
    log.write("b", sync=True, op="release", id=oid, holder=holder, **fields)
    try:
        rec = st.release_retained(fields["cid"], operator="chaos", reason="repaired", holder=holder)
    except CpstoreError as exc:
        log.write("x", sync=True, op="release", id=oid, err=type(exc).__name__, msg=str(exc)[:300])
        return False
    body = rec.body
    log.write("a", sync=True, op="release", id=oid, cid=fields["cid"], digest=rec.digest,
              index=rec.index, left=body["holders_left"], released=body["holder"])  # fmt: skip
    return True
