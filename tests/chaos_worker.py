"""The chaos test's operations (tests/test_chaos_mutations.py): a seeded mix of every mutation.

:class:`Worker` holds one process's operations (tests/chaos_process.py
picks them by weight until the deadline): recorder checkpoints on its own
run, on the shared run and on the contested run (compare-and-set, retried on
ConflictError), forks, ``reset_ref`` / ``set_ref`` / ``release_retained`` on
its fork branches and resets of the contested run, ``repair_ref`` on a
healthy ref (must be refused), ``prune``/``gc`` and dry runs, runs made and
deleted (its own and others'), pinned objects put and unpinned, audit
appends (also from inside a read view), validations, sign-offs and permits
(a used permit must be refused), flushes and ``verify``.

Every store call is logged through :meth:`Worker.call` (``b`` before, then
``a`` or ``x``; the log's lines and when they are fsynced: tests/chaos_log.py).
"""

from __future__ import annotations

import functools
import random
import time
import traceback
from collections.abc import Callable
from typing import Any

from chaos_log import LOGGED, Log

import cpstore
from cpstore.decision.table import Decision, FindingCode, Verdict, verdict_for
from cpstore.errors import ConflictError, CpstoreError, GateError, IntegrityError, NotFoundError

KEEP = (3, 4)  # prune's keep_last choices: a CAS branch's newest 3 are never swept
SHARED = "shared"
BOGUS = "0" * 32  # a checkpoint id nothing stores: the worker's repair_ref target
CONTESTED = "contested"  # CAS checkpoints and resets by every worker: only retention keeps history


def data_verdict(d: Decision) -> Verdict:
    """The verdict less BEST_EFFORT: a stored checkpoint used as P declares no replay mode."""
    return verdict_for([f for f in d.findings if f.code is not FindingCode.BEST_EFFORT])


#: The sweeps a worker runs on its own handle: on a batched one each commits the queue
#: first (docs/durability.md "batched"), so it may fail as a flush does (logged ``batched``).
BATCH_SWEEPS = ("prune", "delete", "dry_run")
#: The ref writes a worker runs on its own handle: on a batched one each commits the queue
#: first too (review100: blind to it, a reset dropped the batch), logged ``batched`` alike.
BATCH_REF_WRITES = ("fork", "reset", "set_ref")
#: A push from a batched handle commits it too (review100: it sent what was committed).
#: A pull is logged as a checkpoint, which commits the queue anyway.
BATCH_TRANSFERS = ("push",)
#: Every operation that, on a batched handle, commits the handle's queue before it runs.
QUEUE_FIRST = (*BATCH_SWEEPS, *BATCH_REF_WRITES, *BATCH_TRANSFERS)


class Worker:
    """The random mix; every store call goes through :meth:`call`."""

    def __init__(self, st: cpstore.Store, log: Log, rng: random.Random, name: str) -> None:
        self.st, self.log, self.rng, self.name = st, log, rng, name
        self.run = f"own-{name}"
        self.batched = st.durability == "batched"
        self.main = self.fresh_main()
        self.main_pending: list[dict[str, Any]] = []  # batched: queued, not yet acknowledged
        self.acked_main: list[str] = []
        self.forks: dict[str, dict[str, Any]] = {}  # branch -> {"base", "heads": [...], "n"}
        self.retained: list[tuple[str, str, str]] = []  # (head id, branch, reset's digest)
        self.tmp_runs: list[str] = []
        self.pins: list[str] = []
        self.blobs: list[bytes] = []
        self.rejected: set[str] = set()
        self.counter = 0

    def fresh_main(self) -> Any:
        """A recorder on this worker's own run (continues from the head)."""
        return self.st.recorder(self.run)

    def call(
        self, op: str, fn: Callable[[], Any], *, destructive: bool = False, **fields: Any
    ) -> Any:
        """Run ``fn`` logged: ``b`` before, ``a`` or ``x`` after; a non-CpstoreError is a defect."""
        oid = self.log.op()
        if self.batched and op in QUEUE_FIRST:
            fields["batched"] = True  # it commits the queue first (tests/chaos_errors.py)
        self.log.write("b", sync=destructive, op=op, id=oid, **fields)
        try:
            out = fn()
        except CpstoreError as exc:
            self.log.write(
                "x", sync=True, op=op, id=oid, err=type(exc).__name__, msg=str(exc)[:300]
            )
            if not isinstance(exc, IntegrityError):
                exc.add_note(LOGGED)  # a loop that catches it logs it no second time
            if (op == "ckpt" or op in QUEUE_FIRST) and self.batched:
                # Batched: any checkpoint call may report that a batch holding this thread's
                # queued checkpoints was dropped ("... not stored"), so none of them is
                # acknowledged by a later flush (op_tmp's direct call once did: a false
                # "acknowledged checkpoint lost"). A sweep, a ref write or a push commits the
                # queue first: its failure may be that commit's, the batch dropped.
                self.main_pending = []
            if isinstance(exc, IntegrityError):
                self.log.write(
                    "defect",
                    err="IntegrityError",
                    sync=True,
                    op=op,
                    id=oid,
                    tb=traceback.format_exc()[-2000:],
                )
                exc.add_note(LOGGED)  # the loop that catches it logs it no second time
            raise
        except BaseException as exc:  # a raw error escaping is the defect we hunt
            self.log.write(
                "defect",
                sync=True,
                op=op,
                id=oid,
                err=type(exc).__name__,
                tb=traceback.format_exc()[-2000:],
            )
            raise CpstoreError("non-cpstore error escaped", where=op, got=repr(exc)) from exc
        return oid, out

    def ack(self, op: str, oid: str, **fields: Any) -> None:
        """Log what the store acknowledged (fsynced)."""
        self.log.write("a", sync=True, op=op, id=oid, **fields)

    def state(self) -> tuple[dict[str, Any], int]:
        """A fresh state (a padded part so the map grows) and a token value."""
        self.counter += 1
        size = self.rng.choices((64, 2048, 16384, 196608), (40, 40, 17, 3))[0]  # the map grows
        pad = self.rng.randbytes(size)
        return {"w": self.name, "i": self.counter, "pad": pad}, self.rng.getrandbits(48)

    def checkpoint(self, rec: Any, run: str, branch: str, *, flush: bool = True) -> str | None:
        """One recorder checkpoint: ``b`` (step, parent, state digest), then ``a`` once durable."""
        state, tok = self.state()
        step = time.monotonic_ns() // 1000  # one clock for every process: never behind a parent's
        payload = (
            self.rng.choice(self.blobs) if self.blobs and self.rng.random() < 0.5 else b"p%d" % tok
        )
        rec.observe(step, "src", payload, pinned_at=1.0)
        rec.token("rng", tok)
        rec.decision(step, "node", pick=tok % 7)
        if (
            run not in (SHARED, CONTESTED) and self.rng.random() < 0.3
        ):  # a lost CAS drops its recorder
            rec.effect("mail", b"e%d" % tok)
        parent, sd = rec.head, cpstore.state_digest(state)
        oid, cid = self.call(  # a raise forgets the queued acks (see call)
            "ckpt",
            lambda: rec.checkpoint(step, state),
            run=run,
            branch=branch,
            parent=parent,
            sd=sd,
            step=step,
        )
        entry = {
            "op": "ckpt",
            "oid": oid,
            "cid": cid,
            "run": run,
            "branch": branch,
            "parent": parent,
            "sd": sd,
        }
        if self.batched and not flush:
            self.main_pending.append(entry)
            return None
        if self.batched:
            self.flush()
        self.ack("ckpt", oid, cid=cid, run=run, branch=branch, parent=parent, sd=sd)
        return str(cid)

    def flush(self) -> None:
        """Commit the queue; acknowledge what it held."""
        pending, self.main_pending = self.main_pending, []
        try:
            self.call("flush", self.st.flush)
        except CpstoreError:
            self.main = self.fresh_main()  # the batch was dropped: the recorder's head is gone
            raise
        for e in pending:
            self.ack(
                "ckpt", e["oid"], **{k: e[k] for k in ("cid", "run", "branch", "parent", "sd")}
            )
            self.acked_main.append(e["cid"])

    # ---- the operations -------------------------------------------------------------
    def op_own(self) -> None:
        """A checkpoint on this worker's own run."""
        try:
            cid = self.checkpoint(self.main, self.run, "main", flush=self.rng.random() < 0.4)
        except CpstoreError:
            self.main = self.fresh_main()
            raise
        if cid is not None:
            self.acked_main.append(cid)

    def op_shared(self) -> None:
        """A checkpoint on the shared run, compare-and-set retried on ConflictError."""
        if self.main_pending:
            self.flush()
        shared_cas(self, 40)

    def op_fork(self) -> None:
        """Fork a branch of the own run from an acknowledged checkpoint and record on it."""
        bases = [c for c in self.acked_main[-6:] if c not in self.rejected]
        if not bases:
            return
        base, branch = self.rng.choice(bases), f"f{self.log.op().replace('.', '_')}"
        if self.rng.random() < 0.5:
            oid, _ = self.call(
                "fork", lambda: self.st.fork(self.run, branch, base), run=self.run, branch=branch
            )
            self.ack("fork", oid, run=self.run, branch=branch, cid=base)
            rec = self.st.recorder(self.run, branch=branch)
        else:
            rec = self.st.recorder(self.run, branch=branch, parent=base)
        self.forks[branch] = {"base": base, "heads": [], "n": 0}
        self.op_on_fork(branch, rec)

    def op_on_fork(self, branch: str, rec: Any = None) -> None:
        """Record on a fork branch (at most 3 checkpoints a branch: fewer than prune keeps)."""
        f = self.forks[branch]
        if f["n"] >= 3:
            return
        rec = rec or self.st.recorder(self.run, branch=branch)
        f["n"] += 1
        cid = self.checkpoint(rec, self.run, branch)
        f["heads"].append(cid)

    def op_reset(self) -> None:
        """Move a fork branch back to its base (or delete it): audited, the old head retained."""
        live = [b for b, f in self.forks.items() if f["heads"]]
        if not live:
            return
        branch = self.rng.choice(live)
        old = self.st.ref(self.run, branch)
        new = None if self.rng.random() < 0.3 else self.forks[branch]["base"]
        if old is None or old == new:
            return
        if self.rng.random() < 0.25:
            self.twin(branch, old)
        oid, rec = self.call(
            "reset",
            lambda: self.st.reset_ref(
                self.run, branch, new, expected_old=old, operator="chaos", reason="r"
            ),
            destructive=True,
            run=self.run,
            branch=branch,
            old=old,
            new=new,
        )
        self.ack(
            "reset",
            oid,
            run=self.run,
            branch=branch,
            old=old,
            new=new,
            digest=rec.digest,
            index=rec.index,
        )
        self.retained.append((old, branch, rec.digest))
        if new is not None and self.rng.random() < 0.5:  # forward again, to the head it left
            oid, _ = self.call(
                "set_ref",
                lambda: self.st.set_ref(self.run, branch, old, expected_old=new),
                run=self.run,
                branch=branch,
            )
            self.ack("set_ref", oid, run=self.run, branch=branch, old=new, new=old)

    def twin(self, branch: str, head: str) -> None:
        """Fork a second branch at ``head``, where ``branch`` sits, before ``branch`` is reset
        away from it (chaos69): a later reset of the twin holds that head a second time, so
        its checkpoint has two holds, one per branch (holders69), and a release of one must
        leave it kept. The twin records nothing (``n`` 3); its base (where a reset moves it
        back, and ``set_ref`` forward again) is ``head``'s parent: ``branch``'s base is no
        ancestor of a head recorded on it after it was deleted (soak pg-69312: the twin's
        ``set_ref`` refused NotDescendantError). ``home`` is the branch ``head``'s fork
        checkpoints are logged on (tests/chaos_check.py's Model.released)."""
        twin = f"g{self.log.op().replace('.', '_')}"
        oid, _ = self.call(
            "fork", lambda: self.st.fork(self.run, twin, head), run=self.run, branch=twin
        )
        self.ack("fork", oid, run=self.run, branch=twin, cid=head)
        home = self.forks[branch].get("home", branch)
        base = self.st.manifest(head).parent
        self.forks[twin] = {"base": base, "heads": [head], "n": 3, "home": home}

    def op_release(self) -> None:
        """Release a retained head (the next prune may sweep its history)."""
        if not self.retained:
            return
        head, branch, holder = self.retained.pop(self.rng.randrange(len(self.retained)))
        home = self.forks.get(branch, {}).get("home", branch)
        oid, rec = self.call(
            "release",
            # Its own reset's hold: another's on the same head stands (holders69).
            lambda: self.st.release_retained(head, operator="chaos", reason="r", holder=holder),
            destructive=True,
            run=self.run,
            branch=branch,
            home=home,
            cid=head,
            holder=holder,
        )
        # ``left``: the holds still on it (none: the next sweep may take its history).
        self.ack("release", oid, cid=head, digest=rec.digest, index=rec.index,
                 left=rec.body["holders_left"])  # fmt: skip

    def op_repair(self) -> None:
        """repair_ref on a healthy ref must be refused (ConflictError) and change nothing.

        Its target is no checkpoint (``BOGUS``): while the operator's rollback of a ref
        stands (tests/chaos_rollback.py) the refs table fails its digest and a repair of
        any branch goes on (docs/store.md: it accepts the table as it stands), so the
        worker's must still be refused, as NotFoundError, changing nothing (with
        ``new=None`` it deleted this main, or set it to the rolled-back head)."""
        before = self.st.ref(self.run)
        if before is None:
            return
        try:
            self.call(
                "repair",
                lambda: self.st.repair_ref(self.run, "main", BOGUS, operator="chaos", reason="r"),
                destructive=True,
                run=self.run,
            )
        except (ConflictError, NotFoundError):
            return
        self.log.write("defect", sync=True, op="repair", tb="repair_ref changed a healthy ref")

    def op_prune(self) -> None:
        """prune / gc(keep_last=...) of every run or of this worker's own."""
        keep, run = self.rng.choice(KEEP), self.rng.choice((None, self.run))
        if self.rng.random() < 0.5:
            oid, n = self.call(
                "prune",
                lambda: self.st.prune(keep_last=keep, run_id=run),
                destructive=True,
                keep=keep,
                run=run,
            )
            self.ack("prune", oid, removed=n, keep=keep, run=run)
        else:
            oid, rep = self.call(
                "prune",
                lambda: self.st.gc(keep_last=keep, run_id=run),
                destructive=True,
                keep=keep,
                run=run,
            )
            # Every id the sweep says it removed: tests/chaos_check.py's prunes_hold checks
            # each is gone and none was kept by anything the log shows (before: unchecked).
            self.ack("prune", oid, removed=len(rep.checkpoints), ids=list(rep.checkpoints),
                     keep=keep, run=run)  # fmt: skip

    def op_dry_run(self) -> None:
        """gc(dry_run=True): the sweep a real one would make, rolled back (nothing may go)."""
        others = [r for r in self.st.runs() if r.startswith("tmp-")]
        if others and self.rng.random() < 0.5:
            oid, rep = self.call(
                "dry_run", lambda: self.st.gc(delete_run=self.rng.choice(others), dry_run=True)
            )
        else:
            oid, rep = self.call("dry_run", lambda: self.st.gc(keep_last=1, dry_run=True))
        self.ack("dry_run", oid, would_remove=len(rep.checkpoints), dry=rep.dry_run)

    def op_tmp(self) -> None:
        """A short run of its own (bytes states that may equal a pinned object), to delete later."""
        run = f"tmp-{self.log.op()}"
        rec = self.st.recorder(run)
        self.tmp_runs.append(run)
        for _ in range(self.rng.randint(1, 2)):
            data = (
                self.rng.choice(self.blobs)
                if self.blobs and self.rng.random() < 0.6
                else self.rng.randbytes(512)
            )
            step = time.monotonic_ns() // 1000
            write = functools.partial(rec.checkpoint, step, data)
            oid, cid = self.call(
                "ckpt",
                write,
                run=run,
                branch="main",
                parent=rec.head,
                sd=cpstore.state_digest(data),
                step=step,
            )
            if self.batched:
                self.flush()
            self.ack(
                "ckpt",
                oid,
                cid=cid,
                run=run,
                branch="main",
                parent=None,
                sd=cpstore.state_digest(data),
            )

    def op_contest(self) -> None:
        """The contested run: every worker CAS-records on it and resets it back (or away)."""
        if self.rng.random() < 0.7:
            shared_cas(self, 40, run=CONTESTED)
            return
        old = self.st.ref(CONTESTED)
        if old is None:
            return
        back = [m.id for m in self.st.history(CONTESTED, limit=3)[1:]]
        new = self.rng.choice(back) if back and self.rng.random() < 0.8 else None
        oid, rec = self.call(
            "reset",
            lambda: self.st.reset_ref(
                CONTESTED, "main", new, expected_old=old, operator="chaos", reason="c"
            ),
            destructive=True,
            run=CONTESTED,
            branch="main",
            old=old,
            new=new,
        )
        self.ack(
            "reset",
            oid,
            run=CONTESTED,
            branch="main",
            old=old,
            new=new,
            digest=rec.digest,
            index=rec.index,
        )

    def op_delete(self) -> None:
        """delete_run / gc(delete_run=) of a short run (its own or another worker's)."""
        others = [r for r in self.st.runs() if r.startswith("tmp-")]
        if self.rng.random() < 0.3 and others:
            run = self.rng.choice(others)
        elif self.tmp_runs:
            run = self.tmp_runs.pop(self.rng.randrange(len(self.tmp_runs)))
        else:
            return
        if self.rng.random() < 0.5:
            oid, _ = self.call("delete", lambda: self.st.delete_run(run), destructive=True, run=run)
        else:
            oid, _ = self.call(
                "delete", lambda: self.st.gc(delete_run=run), destructive=True, run=run
            )
        self.ack("delete", oid, run=run)

    def op_pin(self) -> None:
        """put_object: pinned until unpinned."""
        data = b"pin-%s-%d-" % (self.name.encode(), self.counter) + self.rng.randbytes(
            self.rng.choice((32, 4096))
        )
        self.counter += 1
        oid, d = self.call("pin", lambda: self.st.put_object(data))
        self.ack("pin", oid, digest=d.hex())
        self.pins.append(d.hex())
        self.blobs.append(data)

    def op_unpin(self) -> None:
        """unpin_object of one of its pins."""
        if not self.pins:
            return
        d = self.pins.pop(self.rng.randrange(len(self.pins)))
        oid, was = self.call("unpin", lambda: self.st.unpin_object(d), destructive=True, digest=d)
        self.ack("unpin", oid, digest=d, was=was)
        if not was:
            self.log.write(
                "defect", sync=True, op="unpin", tb=f"a pin this worker made was gone: {d}"
            )

    def op_audit(self) -> None:
        """append_audit."""
        oid, rec = self.call(
            "audit", lambda: self.st.append_audit("chaos", {"w": self.name, "n": self.counter})
        )
        self.ack("audit", oid, digest=rec.digest, index=rec.index)

    def op_validate(self) -> None:
        """validate C against itself (ACCEPT: a signed permit resumes) and another (never)."""
        if len(self.acked_main) < 3:
            return
        c = self.rng.choice(self.acked_main[-4:-1])
        if c in self.rejected:
            return
        if self.rng.random() < 0.6:
            oid, d = self.call(
                "validate", lambda: cpstore.validate(c, c, store=self.st), cid=c, other=c
            )
            self.ack(
                "validate", oid, cid=c, other=c, verdict=data_verdict(d).name, digest=d.audit_digest
            )
            if data_verdict(d) is Verdict.ACCEPT:  # QUARANTINE for BEST_EFFORT alone: signed off
                self.signed_resume(c, d)
            return
        other = self.rng.choice([x for x in self.acked_main[-6:] if x != c])
        oid, d = self.call(
            "validate", lambda: cpstore.validate(c, other, store=self.st), cid=c, other=other
        )
        self.ack(
            "validate", oid, cid=c, other=other, verdict=data_verdict(d).name, digest=d.audit_digest
        )
        self.rejected.add(c)
        if data_verdict(d) is Verdict.ACCEPT:
            return  # the checker reports it
        try:
            self.call("gate", lambda: cpstore.resume_gate(self.st, c, d), cid=c)
        except GateError:
            self.signed_resume(c, d)
            return
        self.log.write(
            "defect", sync=True, op="gate", tb=f"resume_gate let a non-ACCEPT through: {c}"
        )

    def op_validate_shared(self) -> None:
        """Validations of the shared run's recent checkpoints by every worker, racing the gates."""
        hist = [m.id for m in self.st.history(SHARED, limit=4)]
        if len(hist) < 4:
            return
        c = hist[self.rng.choice((1, 2))]  # never the head: a REJECT there stops every CAS
        other = c if self.rng.random() < 0.6 else hist[3]
        oid, d = self.call(
            "validate", lambda: cpstore.validate(c, other, store=self.st), cid=c, other=other
        )
        verdict = data_verdict(d)
        self.ack("validate", oid, cid=c, other=other, verdict=verdict.name, digest=d.audit_digest)
        if verdict is Verdict.ACCEPT:
            self.signed_resume(c, d, run=SHARED)

    def signed_resume(self, c: str, d: Decision, run: str | None = None) -> None:
        """Sign the decision off, resume a fork with the permit, then try the permit again."""
        _, so = self.call(
            "signoff", lambda: cpstore.sign_off(self.st, d, operator="chaos", reason="r"), cid=c
        )
        _, permit = self.call(
            "gate", lambda: cpstore.resume_gate(self.st, c, d, sign_off=so), cid=c, signed=True
        )
        branch, run = f"g{self.log.op().replace('.', '_')}", run or self.run
        rec = self.st.recorder(run, branch=branch, parent=c, permit=permit)
        if run == self.run:
            self.forks[branch] = {"base": c, "heads": [], "n": 0}
            self.op_on_fork(branch, rec)
        else:
            self.checkpoint(rec, run, branch)
        again = f"g{self.log.op().replace('.', '_')}"
        try:
            self.call(
                "reuse",
                lambda: self.st.recorder(run, branch=again, parent=c, permit=permit),
                cid=c,
            )
        except GateError:
            return
        self.log.write("defect", sync=True, op="reuse", tb=f"a used permit resumed again: {c}")

    def op_read_write(self) -> None:
        """A write from a thread holding a read view (StoreError only when the map must grow)."""
        if not self.acked_main:
            return
        with self.st.read(self.rng.choice(self.acked_main[-3:])) as cp:
            cp.state()
            oid, rec = self.call(
                "audit", lambda: self.st.append_audit("chaos", {"w": self.name, "in_read": True})
            )
            self.ack("audit", oid, digest=rec.digest, index=rec.index)

    def op_verify(self) -> None:
        """store.verify() from inside the mix."""
        oid, rep = self.call("verify", self.st.verify)
        self.ack("verify", oid, ok=rep.ok, problems=[str(p)[:300] for p in rep.problems[:5]])

    def op_flush(self) -> None:
        """flush (batched: commits the queue; none: an fsync)."""
        if self.batched:
            self.flush()
        else:
            self.call("flush", self.st.flush)


def shared_cas(w: Worker, tries: int, run: str = SHARED) -> None:
    """One checkpoint on a run every worker writes: CAS from the head read, retried on conflict."""
    for _ in range(tries):
        try:
            rec = w.st.recorder(run, parent=w.st.ref(run))
            w.checkpoint(rec, run, "main")
            return
        except ConflictError:
            continue
