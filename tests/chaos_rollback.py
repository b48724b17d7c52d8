"""The operator's second damage (chaos68): a ref put back to an older head WITH A VALID CHECK.

What restoring an old backup of the refs table does: :func:`roll_back_and_repair`
overwrites a ``main`` ref (a worker's own run or the shared run), behind cpstore's
back, with a check-passing value naming an older checkpoint of the same branch
(``H~1`` or ``H~2`` of the head ``H`` it read; only if the ref still names ``H``).
The ref passes its own check, so checkpoints, forks, resets and reads go on (a
recorder on the rolled-back branch extends the older head: a "side chain"); the refs
table fails ``meta/refs_digest``, which must stop retention (prune, gc, delete_run,
dry runs) so nothing the true head reaches is swept (docs/store.md, "Every ref read is
checked"). Meanwhile the operator tries a real ``gc(keep_last=3)`` itself (logged as a
``prune``: it must be refused), then mends the ref with ``repair_ref(run, "main", H)``
(docs/store.md, "Repairing a damaged ref"), which keeps the side chain's head as a
retained head.

Logged (the operator's ``w99.log``): ``rollback`` (``b``: run, branch, ``old`` = H,
``new`` = the older head, ``line`` = the ids from H down to it, exclusive; ``a``:
``written``, False when the head had moved), the probe ``prune``, and ``ref_repair``
(``b``: ``new`` = H; ``a``: digest, index, ``retained``, ``kept``: the heads it holds).

:func:`rollbacks` reads the windows back for the checker's rules:

* retention: an IntegrityError naming ``meta/refs_digest`` is allowed only for a
  retention operation that overlapped a standing rollback; a retention operation
  acknowledged wholly inside one (after the write, before the repair began) is a
  defect (:func:`retention_problems`);
* checkpoints: the side chain (checkpoints begun during the rollback on the older
  head's line, by their logged parent) never counts as "newer" for a keep_last sweep
  of the true head's line, and is itself never removable (the repair retains its
  head); a CAS branch may have two acknowledged children of the older head: one before
  the rollback, one on the side chain (tests/chaos_check.py);
* refusals: a ConflictError naming the rolled-back ref only for a checkpoint (flush,
  close) begun before the repair ended, or extending the side chain or the older head
  after it; a worker's ``repair_ref`` of its intact main is NotFoundError (its bogus
  target) only while a rollback stood, ConflictError otherwise (tests/chaos_errors.py);
* reads: a resolve may name the older head's line during the window, and the true
  head's after the repair (placements in tests/chaos_names.py).
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Any

from chaos_log import Log
from chaos_worker import SHARED

import cpstore
from cpstore.errors import CpstoreError
from cpstore.store.refs import RECORDED, SET, pack_ref

INF = math.inf
ROLLBACK, REPAIR, VANISH = "rollback", "ref_repair", "vanish"
DIGEST = "meta/refs_digest"
#: What a create refused while the refs table is short of its count says (refs70).
SHORT = "is not created from nothing"
#: Retention operations that always sweep (or refuse): none may be acknowledged while
#: the refs table fails its digest. A saver's delete or prune sweeps only a run with
#: refs (it may end without a sweep), so it may only refuse with the digest.
RETENTION = ("prune", "delete", "dry_run")
SWEEPING = (*RETENTION, "lgdelete", "lgprune")


def refused_by_digest(b: dict[str, Any]) -> bool:
    """Whether operation ``b`` may refuse naming ``meta/refs_digest`` while a rollback
    stands: retention, and a push or pull (``ckpt`` with ``pull``), which move no ref of
    a store whose refs table fails its digest, on either side (docs/store.md, "push and
    pull"; push69), and a ``RUN@BRANCH`` name no ref reads (``resolve``: the missing ref
    may be the one the table lost, so it is damage, not "no such branch"; cli99,
    docs/store.md). A checkpoint, fork or reset never does."""
    op = b.get("op")
    return op in SWEEPING or op in ("push", "resolve") or (op == "ckpt" and bool(b.get("pull")))


#: The keep_last of the operator's probe (KEEP's smaller one).
PROBE_KEEP = 3

Ops = list[tuple[dict[str, Any], dict[str, Any] | None]]


@dataclass
class Rollback:
    """One written rollback of ``run``/``branch`` from ``old`` to ``new`` and its repair."""

    run: str
    branch: str
    old: str
    new: str | None  # None: a vanish
    begin: float  # its ``b``: the write came after
    written: float  # its ``a``: the write committed before (INF: not acknowledged)
    repair_begin: float  # the repair's ``b`` (INF: none logged)
    end: float  # the repair's ``a``: the digest holds again (INF: not repaired)
    line: set[str] = field(default_factory=set)  # the true head's line above ``new``
    side: set[str] = field(default_factory=set)  # op ids of side-chain checkpoints
    side_cids: set[str] = field(default_factory=set)  # acknowledged side-chain ids
    #: "vanish" (chaos70: the ref row deleted, ``new`` None; tests/chaos_vanish.py)
    kind: str = ROLLBACK

    @property
    def ref(self) -> str:
        return f"refs/{self.run}/{self.branch}"

    @property
    def what(self) -> str:
        """How the ref stood: for the checker's messages."""
        return "vanished" if self.kind == VANISH else f"rolled back to {self.new}"


def _end(e: dict[str, Any] | None) -> float:
    return INF if e is None else float(e["t"])


def rollbacks(ops: Ops) -> list[Rollback]:
    """Every rollback whose write may have committed, with its repair and side chain, and
    every vanish (chaos70: tests/chaos_vanish.py), whose window the digest fails too."""
    out = vanishes(ops)
    repairs = [(b, e) for b, e in ops if b["op"] == REPAIR and "vanish" not in b]
    for b, e in ops:
        if b["op"] != ROLLBACK or (e is not None and not (e["ev"] == "a" and e.get("written"))):
            continue
        run, branch = b["run"], b["branch"]
        later = [
            (rb, re) for rb, re in repairs
            if (rb.get("run"), rb.get("branch")) == (run, branch) and rb["t"] > b["t"]
        ]  # fmt: skip
        rb_, re_ = min(later, key=lambda x: x[0]["t"]) if later else (None, None)
        rep_end = INF if re_ is None or re_["ev"] != "a" else float(re_["t"])
        roll = Rollback(
            run, branch, b["old"], b["new"], b["t"], _end(e),
            INF if rb_ is None else float(rb_["t"]), rep_end, set(b.get("line") or [b["old"]]),
        )  # fmt: skip
        _side(ops, roll)
        out.append(roll)
    return out


def vanishes(ops: Ops) -> list[Rollback]:
    """Every vanish (a ref row deleted outside cpstore) whose delete may have committed,
    as a window from its ``b`` to the end of the repair naming it (``vanish``: its id).
    ``new`` None: while it stands the ref is absent (a CAS on it conflicts) and the refs
    table is one ref short of its digest's count (no ref is created; retention and
    push/pull refuse); ``old`` the head it had, which the repair puts back."""
    out = []
    for b, e in ops:
        if b["op"] != VANISH or (e is not None and not (e["ev"] == "a" and e.get("written"))):
            continue
        mine = [(rb, re) for rb, re in ops if rb["op"] == REPAIR and rb.get("vanish") == b["id"]]
        rb_, re_ = mine[0] if mine else (None, None)
        begin, end = INF if rb_ is None else float(rb_["t"]), _end(re_)
        if re_ is not None and re_["ev"] != "a":
            end = INF
        # A rollback's repair (another ref's) while it stood accepts the table as it
        # stands: the digest holds again without the vanished ref, whose head it keeps.
        for ab, ae in accepting(ops, b["t"]):
            if ab["t"] < end:
                begin, end = min(begin, float(ab["t"])), min(end, _end(ae))
        out.append(Rollback(
            b["run"], b["branch"], b["old"], None, b["t"], _end(e), begin, end, kind=VANISH,
        ))  # fmt: skip
    return out


def accepting(ops: Ops, after: float) -> Ops:
    """The acknowledged repairs of a rollback (not a vanish's own) begun after ``after``
    that found the table short of its count: each accepted the table as it stood."""
    return [
        (b, e) for b, e in ops
        if b["op"] == REPAIR and "vanish" not in b and b["t"] > after
        and e is not None and e["ev"] == "a"
        and (e.get("refs") or {}).get("found", 0) < ((e.get("refs") or {}).get("recorded") or 0)
    ]  # fmt: skip


def _side(ops: Ops, roll: Rollback) -> None:
    """The checkpoints begun during ``roll`` on the older head's line: parent the older
    head, a side-chain id, or an id the log did not acknowledge before the rollback
    (not the true head: a recorder still on it conflicts)."""
    ckpts = [
        (b, e) for b, e in ops
        if b["op"] == "ckpt" and (b.get("run"), b.get("branch")) == (roll.run, roll.branch)
    ]  # fmt: skip
    pre = {e["cid"] for b, e in ckpts if e is not None and e["ev"] == "a" and e["t"] < roll.begin}
    for b, e in sorted(ckpts, key=lambda x: x[0]["t"]):
        if b["t"] > roll.end:
            continue
        p, cid = b.get("parent"), (e["cid"] if e is not None and e["ev"] == "a" else None)
        if p == roll.new:
            # On the older head: also one begun before the rollback by a recorder that read
            # it then, acknowledged after the write: its CAS found it again (pg-68006, the
            # shared run), unless it is the true head's line above it. One begun before and
            # never acknowledged stays off the side chain: it may be that line (crash-68011:
            # a batched checkpoint queued on the head 6 s before, counted as newer there).
            if b["t"] <= roll.begin and (cid is None or _end(e) <= roll.begin or cid in roll.line):
                continue
        elif not (
            p in roll.side_cids
            or (roll.begin < b["t"] and p is not None and p not in pre and p != roll.old)
        ):
            continue
        roll.side.add(b["id"])
        if cid is not None:
            roll.side_cids.add(cid)


def digest_failed(
    rolls: list[Rollback], b: dict[str, Any], e: dict[str, Any], slack: float
) -> bool:
    """The operation (``b``..``e``) overlapped a rollback standing (plus ``slack`` after)."""
    t0 = b.get("t", e["t"])
    return any(t0 <= r.end + slack and e["t"] >= r.begin for r in rolls)


def conflict_explained(rolls: list[Rollback], b: dict[str, Any], e: dict[str, Any],
                       ops: Ops) -> bool:  # fmt: skip
    """A ConflictError naming a rolled-back ref: the call began before the repair ended,
    or it extended the older head or the side chain (a recorder made during the
    rollback, used after the repair), or one of the process's checkpoints still queued
    then did (batched: a checkpoint call that fills the batch, a flush or a close commits
    the queue, whose first checkpoint is the one on the older line; the later ones name
    unacknowledged parents)."""
    msg = e.get("msg", "")
    for r in rolls:
        if not (r.ref in msg and r.begin < e["t"]):
            continue
        if b.get("t", e["t"]) <= r.end:
            return True
        stale = r.side_cids | {r.new}
        if b["op"] == "ckpt" and b.get("parent") in stale:
            return True
        if any(
            ob["op"] == "ckpt" and (ob.get("run"), ob.get("branch")) == (r.run, r.branch)
            and (ob["w"], ob["inc"]) == (e["w"], e["inc"]) and r.begin < ob["t"] < e["t"]
            and (oe is None or oe["t"] >= e["t"]) and ob.get("parent") in stale
            for ob, oe in ops
        ):  # fmt: skip
            return True
    return False


def retention_problems(m: Any) -> list[str]:
    """A retention operation acknowledged wholly inside a standing rollback: it swept (or
    dry-ran) by a refs table that fails its digest (``m``: a tests/chaos_check.py Model)."""
    return [
        f"{b['op']} {b['id']} ran while {r.ref} stood {r.what} (refs digest "
        f"failing from the write to the repair): retention must refuse"
        for r in m.rollbacks
        if r.written < INF
        for op in RETENTION
        for b, a in m.acked(op)
        if r.written < b["t"] and a["t"] < r.repair_begin
    ]


def transfer_problems(m: Any) -> list[str]:
    """A push from, or a pull into, the worker's store acknowledged wholly inside a
    standing rollback: it moved refs of (or carried refs out of) a table that fails its
    digest, which push and pull refuse (docs/store.md, "push and pull"; push69)."""
    return [
        f"{b['op']}{' (pull)' if b.get('pull') else ''} {b['id']} landed while {r.ref} stood "
        f"{r.what} (refs digest failing from the write to the repair): push "
        "and pull must refuse"
        for r in m.rollbacks
        if r.written < INF
        for b, a in [*m.acked("push"), *((b, a) for b, a in m.acked("ckpt") if b.get("pull"))]
        if r.written < b["t"] and a["t"] < r.repair_begin
    ]


def probe(st: cpstore.Store, log: Log) -> None:
    """The operator's own sweep while the table fails its digest (judged like a prune)."""
    oid = log.op()
    log.write("b", sync=True, op="prune", id=oid, keep=PROBE_KEEP, run=None, probe=True)
    try:
        rep = st.gc(keep_last=PROBE_KEEP)
    except CpstoreError as exc:
        log.write("x", sync=True, op="prune", id=oid, err=type(exc).__name__, msg=str(exc)[:300])
        return
    log.write("a", sync=True, op="prune", id=oid, removed=len(rep.checkpoints),
              ids=list(rep.checkpoints), keep=PROBE_KEEP, run=None)  # fmt: skip


def roll_back(st: cpstore.Store, log: Log, run: str, rng: random.Random) -> tuple[str, str] | None:
    """Put ``run``'s main back to an older head of it, with a true check, outside cpstore.

    Returns (the true head, the older head) when written, None when the branch was too
    short or moved meanwhile (logged ``written: False``)."""
    try:
        hist = [m.id for m in st.history(run, limit=3)]
    except CpstoreError:
        return None
    if len(hist) < 2:
        return None
    old, new = hist[0], rng.choice(hist[1:])
    origin = RECORDED if st.manifest(new).branch == "main" else SET
    key, refs = f"{run}\0main".encode(), st.backend.dbs["refs"]

    def put(txn: Any) -> bool:
        value = txn.get(key, db=refs)
        if value is None or bytes(value)[:16] != bytes.fromhex(old):
            return False  # moved since the history read: not the head to roll back
        txn.put(key, pack_ref(key, bytes.fromhex(new), origin), db=refs)
        return True

    line = hist[: hist.index(new)]  # H (and H~1): the true head's line above the older head
    oid = log.op()
    log.write("b", sync=True, op=ROLLBACK, id=oid, run=run, branch="main", old=old, new=new,
              line=line)  # fmt: skip
    written = bool(st.backend.write_txn(put))
    log.write("a", sync=True, op=ROLLBACK, id=oid, written=written)
    return (old, new) if written else None


def repair(st: cpstore.Store, log: Log, run: str, head: str, *, force: bool = False) -> None:
    """repair_ref of ``run``'s main to its true head ``head``, logged; ``force`` beside a
    vanish (tests/chaos_vanish.py), whose loss the repair then accepts (repair72)."""
    oid = log.op()
    log.write("b", sync=True, op=REPAIR, id=oid, run=run, branch="main", new=head)
    try:
        rec = st.repair_ref(run, "main", head, operator="chaos", reason="rolled back", force=force)
    except CpstoreError as exc:
        log.write("x", sync=True, op=REPAIR, id=oid, err=type(exc).__name__, msg=str(exc)[:300])
        return
    log.write("a", sync=True, op=REPAIR, id=oid, digest=rec.digest, index=rec.index,
              retained=rec.body["retained"], kept=rec.body["kept"],
              refs=rec.body["refs"])  # fmt: skip


def roll_back_and_repair(store: str, log: Log, rng: random.Random, *, force: bool = False) -> None:
    """The operator: roll a main ref back, let the workers meet it, try a sweep, repair."""
    with cpstore.open(store) as st:
        runs = [r for r in st.runs() if r.startswith("own-")] + [SHARED]
        run = rng.choice(runs)
        done = roll_back(st, log, run, rng)
        if done is None:
            return
        # Long enough for the workers to meet it (a 120 s soak's 5 rollbacks of 0.05-0.4 s
        # saw no checkpoint recorded on the older head): recorders conflict, then extend it.
        time.sleep(rng.uniform(0.2, 1.0))
        probe(st, log)
        time.sleep(rng.uniform(0.05, 0.4))
        repair(st, log, run, done[0], force=force)


def rollback_problems(store: cpstore.Store, m: Any, frees: Any) -> list[str]:
    """:func:`retention_problems` and :func:`transfer_problems`; each acknowledged
    repair's audit record is at its index, and the head it retained is listed and whole
    unless a release of the repair's hold may have landed (``frees``: tests/chaos_check.py's,
    which a release naming another holder does not pass)."""
    problems = retention_problems(m) + transfer_problems(m)
    retained = store.retained()
    for _, a in m.acked(REPAIR):
        got = store.get_audit(a["digest"]).index
        if got != a["index"]:
            problems.append(
                f"ref_repair record {a['digest']} at {got}, acknowledged at {a['index']}"
            )
        kept = a.get("retained")
        if kept is None or (kept in retained and not store.verify_checkpoint(kept)):
            continue
        if not any(
            rb["op"] == "release" and rb.get("cid") == kept and frees(rb, re, a["digest"])
            for rb, re in m.ops
        ):
            problems.append(f"the head a ref_repair retained is lost: {kept}")
    return problems
