"""The operator's third damage (chaos70): a ref row deleted behind cpstore's back.

What a hand-edited or half-restored refs table does: :func:`vanish_and_repair` deletes
the row of a fork branch of an own-* run (sometimes a run's ``main``) in a raw write
txn, leaving ``meta/refs_digest`` as it was, so the table holds one ref fewer than the
digest counts. While it stands (docs/store.md, "No ref is created from nothing"):

* every write that would create a ref, in any run (a recorder's first checkpoint, a
  fork, a LangGraph thread's first put, a pull landing a new branch), is refused with
  IntegrityError naming ``meta/refs_digest`` ("... is not created from nothing");
* retention and push/pull refuse, naming ``meta/refs_digest`` (the table fails it);
* a checkpoint on the vanished branch from the head its recorder held meets no ref:
  ConflictError, never a create;
* moves of other refs go on.

The operator lets the workers meet it, sometimes flips another fork's check meanwhile
(chaos_roles.damage_and_repair: its rules must hold beside a vanish), tries a sweep
(logged as a ``prune``: it must be refused), then puts the ref back at the head it had
with ``repair_ref(run, branch, head)``.

Logged (``w99.log``): ``vanish`` (``b``: run, branch, ``old`` = the head; ``a``:
``written``, False when the ref had moved or gone), the probe ``prune``, and
``ref_repair`` (``b``: ``new`` = the head, ``vanish`` = the vanish's id; ``a``: digest,
index, ``retained``, ``kept``, ``damaged``, ``new``). tests/chaos_rollback.py's
``rollbacks`` reads each vanish as a window (``kind`` "vanish", ``new`` None) from its
``b`` to its repair's ``a``, so the rollback rules on retention, push/pull, conflicts
and a worker's repair apply to it too; :func:`vanish_problems` adds its own.
"""

from __future__ import annotations

import random
import time
from typing import Any

from chaos_check import may_have_committed
from chaos_log import Log
from chaos_roles import damage_and_repair, release_repair_hold
from chaos_rollback import INF, REPAIR, VANISH, probe, roll_back_and_repair

import cpstore
from cpstore.errors import CpstoreError


def operate(store: str, log: Log, rng: random.Random) -> None:
    """One of the operator's damages (and repairs), or a release of a repair's hold."""
    pick = rng.random()
    if pick < 0.25:
        damage_and_repair(store, log, rng)  # a ref's check flipped
    elif pick < 0.5:
        roll_back_and_repair(store, log, rng)  # a ref put back, true check
    elif pick < 0.6:
        release_repair_hold(store, log, rng)  # chaos69: one of several holds
    elif pick < 0.9:
        vanish_and_repair(store, log, rng)  # chaos70: a ref row deleted (3 turns in 10)


def vanish(st: cpstore.Store, log: Log, run: str, branch: str) -> tuple[str, str] | None:
    """Delete ``run``/``branch``'s row outside cpstore (the digest untouched): (the
    vanish's id, the head it named), or None when it moved or went since it was read
    (logged ``written`` False)."""
    try:
        head = st.ref(run, branch)
    except CpstoreError:
        return None
    if head is None:
        return None
    key, refs = f"{run}\0{branch}".encode(), st.backend.dbs["refs"]

    def delete(txn: Any) -> bool:
        value = txn.get(key, db=refs)
        if value is None or bytes(value)[:16] != bytes.fromhex(head):
            return False
        return bool(txn.delete(key, db=refs))

    oid = log.op()
    log.write("b", sync=True, op=VANISH, id=oid, run=run, branch=branch, old=head)
    written = bool(st.backend.write_txn(delete))
    log.write("a", sync=True, op=VANISH, id=oid, written=written)
    return (oid, head) if written else None


def put_back(st: cpstore.Store, log: Log, run: str, branch: str, done: tuple[str, str]) -> None:
    """repair_ref of the vanished ref to the head it had (``done``: the vanish), logged."""
    vid, head = done
    oid = log.op()
    log.write("b", sync=True, op=REPAIR, id=oid, run=run, branch=branch, new=head, vanish=vid)
    try:
        rec = st.repair_ref(run, branch, head, operator="chaos", reason="vanished")
    except CpstoreError as exc:
        log.write("x", sync=True, op=REPAIR, id=oid, err=type(exc).__name__, msg=str(exc)[:300])
        return
    body = rec.body
    log.write("a", sync=True, op=REPAIR, id=oid, digest=rec.digest, index=rec.index,
              retained=body["retained"], kept=body["kept"], damaged=body["damaged"],
              new=body["new"])  # fmt: skip


def vanish_and_repair(store: str, log: Log, rng: random.Random) -> None:
    """The operator: delete a ref row, let the workers meet it, try a sweep, put it back."""
    with cpstore.open(store) as st:
        runs = [r for r in st.runs() if r.startswith("own-")]
        forks = [(run, b) for run in runs for b in st.branches(run) if b != "main"]
        if rng.random() < 0.3 or not forks:
            if not runs:
                return
            run, branch = rng.choice(runs), "main"
        else:
            run, branch = rng.choice(forks)
        done = vanish(st, log, run, branch)
        if done is None:
            return
        time.sleep(rng.uniform(0.2, 0.8))
        beside = rng.random()  # another damage beside it: its rules hold
        if beside < 0.3:
            damage_and_repair(store, log, rng)
        elif beside < 0.5 and branch != "main":
            # Its repair accepts the table without the vanished ref (keeping its head):
            # the put back below is then NotFoundError, and the ref stays gone. Not a
            # main: its worker would record a second root there, which the CAS rule
            # (tests/chaos_check.py cas_linear) reads as a bypassed compare-and-set.
            # Forced: unforced, a repair of an intact ref while the digest names the
            # vanished one is refused (repair72; tests/test_repair72_intact_route.py).
            roll_back_and_repair(store, log, rng, force=True)
        probe(st, log)
        time.sleep(rng.uniform(0.05, 0.3))
        put_back(st, log, run, branch, done)


def _creates(m: Any, b: dict[str, Any], a: dict[str, Any]) -> bool:
    """Whether acknowledged operation ``b`` created a ref: a fork, a root checkpoint (a
    new run or branch, a first pull, a LangGraph thread's first put), or a fork branch's
    first checkpoint (its recorder made with the base as parent). Not a fork branch's
    checkpoint after one on it that may have committed unacknowledged (a lost
    connection's, a killed one's: the ref then stood, and this one moved it; seed 76205's
    server-crash run: a resumed branch's first checkpoint told StoreConnectionError, the
    worker's next one on it acknowledged inside a vanish and read as a create)."""
    op = b["op"]
    if op == "fork" or (op in ("ckpt", "lgput") and b.get("parent") is None):
        return True
    if op != "ckpt" or not str(b.get("branch", "")).startswith(("f", "g")):
        return False
    return not any(
        ob["op"] in ("ckpt", "fork") and ob["t"] < b["t"]
        and (oe is None or oe["t"] < b["t"]) and may_have_committed(oe)
        and (ob.get("run"), ob.get("branch")) == (b["run"], b["branch"])
        for ob, oe in m.ops
    )  # fmt: skip


def vanish_problems(store: cpstore.Store, m: Any) -> list[str]:
    """chaos70's rules (``m``: a tests/chaos_check.py Model):

    * no create acknowledged wholly inside a vanish (begun after the delete committed,
      acknowledged before the repair began): the table was short of its count;
    * no checkpoint acknowledged on the vanished branch wholly inside it: its CAS met no
      ref (ConflictError) or was a create (refused);
    * the acknowledged repair put the ref back (``damaged`` None) at the head it had.

    Retention and push/pull wholly inside a vanish are chaos_rollback's rules (a vanish
    is one of its windows); so are the refusals (tests/chaos_errors.py)."""
    out = []
    vans = [r for r in m.rollbacks if r.kind == VANISH and r.written < INF]
    for r in vans:
        for b, a in m.acks:
            if not (r.written < b["t"] and a["t"] < r.repair_begin):
                continue
            if _creates(m, b, a):
                out.append(
                    f"{b['op']} {b['id']} created a ref while {r.ref} stood vanished (the "
                    "refs table short of its count): no ref is created from nothing"
                )
            elif b["op"] == "ckpt" and (b.get("run"), b.get("branch")) == (r.run, r.branch):
                out.append(f"ckpt {b['id']} recorded on {r.ref} while it stood vanished")
    for b, a in m.acked(REPAIR):
        if "vanish" not in b:
            continue
        old = next((vb["old"] for vb, _ in m.ops if vb["id"] == b["vanish"]), None)
        body = store.get_audit(a["digest"]).body
        if (body["new"], body["damaged"], a.get("new")) != (old, None, old):
            out.append(
                f"the repair {b['id']} of vanished {b['run']}@{b['branch']} put back "
                f"{body['new']} (damaged {body['damaged']}), not its head {old}"
            )
    return out
