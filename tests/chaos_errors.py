"""Which refusals the chaos mix may meet: operation -> the error classes the docs allow.

A worker logs every CpstoreError an operation raised (``x``, with class and message)
and every one a loop of the mix caught outside a logged call (``err``). Before, any
CpstoreError passed as "a documented refusal", so a wrong but plausible error (a
ConflictError on a branch nobody races, a connection error with no server restart,
NotFoundError for a checkpoint nothing removed) went unseen. :func:`refusal_problems`
flags every one not allowed here, naming op, class and message.

Allowed everywhere, under a condition the log shows:

* ``StoreConnectionError`` / ``CommitLostError`` / ``OutcomeUnknownError``: only across a PostgreSQL
  server restart (docs/store.md "PostgreSQL backend", "Faults": a lost connection
  says so; nothing else here fails a commit);
* ``IntegrityError`` naming ``refs/<run>/<branch>``: only while the operator's damage
  of that ref stands (docs/store.md "Every ref read is checked": a ref read, a
  ``prune``/``delete_run`` sweep or a push refuses by a damaged ref);
* ``IntegrityError`` naming ``meta/refs_digest``: only for retention (prune, gc,
  delete_run, dry runs, a saver's delete or prune) and a push or pull (either side's
  table: docs/store.md, "push and pull") while the operator's rollback of a ref stood;
  ``ConflictError`` naming that ref for a checkpoint begun before its repair
  ended or extending the older head's line (tests/chaos_rollback.py);
* ``GateError`` for recording on from a checkpoint whose standing decision is not
  ACCEPT, and ``GateError``/``SignOffError`` for a decision a later one superseded,
  when the log shows a validation of it began before (docs/decision-table.md);
* a batched checkpoint or flush relaying another thread's failed commit
  (docs/durability.md "batched"): the relayed error is judged as that commit's;
* a sweep (prune, gc, delete_run, a dry run) on a batched handle commits the handle's
  queue first (docs/durability.md "batched") and raises what that commit raises, so it
  may meet every refusal a flush may (:func:`commits_queue`; ci stop 52, seed 522991484:
  "refusal not allowed: prune ConflictError ... refs/own-w2/main"); so does a ref
  write on a batched handle (fork, reset_ref, set_ref) and a push from one (review100).

Per operation (docs/store.md "Recorder and reader", "Refs, branches, listing",
"Retention", "push and pull"; docs/decision-table.md for gates), in :data:`TABLE`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from chaos_names import refusal_allowed as name_refusal_allowed
from chaos_rollback import (
    SHORT,
    VANISH,
    accepting,
    conflict_explained,
    digest_failed,
    refused_by_digest,
    rollbacks,
)
from chaos_worker import QUEUE_FIRST

#: What a thread's flush says of its checkpoints another thread's failed commit dropped.
RELAYED = "in another thread's batch commit"
#: The runs every worker compare-and-sets (a lost race is ConflictError).
RACED = ("refs/shared/main", "refs/contested/main")
#: How long after a server restart ends a connection it broke may still be met (the
#: pool meets a dead idle connection at its next use, which may be a while later).
RESTART_SLACK_NS = 5_000_000_000
#: A pool wait that timed out ("no connection to the server within 30 s") began that
#: long before it was caught: a loop outside a logged call logs only the catch, so the
#: wait is dated back by the store's pool wait (pg_backend.POOL_WAIT) plus a margin —
#: a wait begun inside a restart can outlast it, because the pool's reconnect backoff
#: doubles while the server is down (ci2: a racer caught one 30 s after the restart).
POOL_WAIT_NS = 35_000_000_000
#: How long after the operator's repair a refusal a loop caught outside a logged call
#: (logged with its own time, not its call's start) may still have met the damaged ref.
#: A logged call begun after the repair was acknowledged gets none: it must see the
#: repaired ref (before: 1 s for every call, which excused a stale read of the ref).
DAMAGE_SLACK_NS = 1_000_000_000
#: The operations that remove checkpoints: a "pruned" refusal needs one begun before it.
SWEEPS = ("prune", "delete", "lgprune", "lgdelete")

Rule = Callable[[dict[str, Any], dict[str, Any], "Context"], bool]


class Context:
    """The log's windows (server restarts, damaged refs) and history, for the rules."""

    def __init__(self, ops: list[tuple[dict[str, Any], dict[str, Any] | None]]) -> None:
        inf = float("inf")

        def end(e: dict[str, Any] | None) -> float:
            return inf if e is None else float(e["t"])

        self.ops = ops
        self.end = end
        self.restarts = [(b["t"], end(e)) for b, e in ops if b["op"] == "restart"]
        self.damage = [
            (b["t"], end(e), f"refs/{b['run']}/{b['branch']}")
            for b, e in ops
            if b["op"] == "damage"
        ]
        self.rollbacks = rollbacks(ops)  # tests/chaos_rollback.py: refs put back, digest fails

    def in_restart(self, b: dict[str, Any], e: dict[str, Any]) -> bool:
        """The operation overlapped a server restart (plus the slack after it)."""
        t0 = b.get("t", e["t"])
        if b.get("id") == "-" and "no connection to the server within" in e.get("msg", ""):
            t0 = min(t0, e["t"] - POOL_WAIT_NS)  # outside a logged call: date the wait back
        return any(t0 <= t1 + RESTART_SLACK_NS and e["t"] >= r0 for r0, t1 in self.restarts)

    def damaged_ref(self, b: dict[str, Any], e: dict[str, Any]) -> bool:
        """The message names a ref the operator had damaged while the operation ran."""
        t0, msg = b.get("t", e["t"]), e.get("msg", "")
        slack = DAMAGE_SLACK_NS if b.get("id") == "-" else 0  # "-": outside a logged call
        return any(
            t0 <= t1 + slack and e["t"] >= d0 and re.search(rf"{re.escape(ref)}\b", msg)
            for d0, t1, ref in self.damage
        )

    def digest_failed(self, b: dict[str, Any], e: dict[str, Any]) -> bool:
        """The operation overlapped a rollback standing: the refs table failed its digest."""
        slack = DAMAGE_SLACK_NS if b.get("id") == "-" else 0
        return digest_failed(self.rollbacks, b, e, slack)

    def short_create(self, b: dict[str, Any], e: dict[str, Any]) -> bool:
        """A create refused because the refs table is short of its count (refs70): only
        while a vanish stood (tests/chaos_vanish.py), and never a checkpoint on the
        vanished branch from a head (its CAS expected the old head: ConflictError)."""
        slack = DAMAGE_SLACK_NS if b.get("id") == "-" else 0
        vans = [r for r in self.rollbacks if r.kind == VANISH]
        if any(
            b["op"] == "ckpt" and not b.get("pull") and b.get("parent") in self.heads(r)
            and (b.get("run"), b.get("branch")) == (r.run, r.branch)
            and r.begin < e["t"] and b.get("t", e["t"]) <= r.end
            for r in vans
        ):  # fmt: skip
            return False
        return digest_failed(vans, b, e, slack)

    def heads(self, r: Any) -> set[str]:
        """The heads vanish ``r``'s branch may have had: the one it vanished at and every
        checkpoint acknowledged there before. A recorder holding one compare-and-sets on
        it. Not a batched checkpoint queued after a root queued meanwhile (its parent an
        unacknowledged id; the batch's create is refused: seed 70033's false alarm)."""
        return {r.old} | {
            e["cid"] for b, e in self.ops
            if b["op"] == "ckpt" and (b.get("run"), b.get("branch")) == (r.run, r.branch)
            and e is not None and e["ev"] == "a" and e["t"] < r.written
        }  # fmt: skip

    def accepted(self, b: dict[str, Any]) -> bool:
        """``b`` puts back a vanished ref, and a rollback's repair begun after the vanish
        accepted the table (its digest holds without the ref) before ``b`` began."""
        vid = b.get("vanish")
        begun = [vb["t"] for vb, _ in self.ops if vb["op"] == VANISH and vb["id"] == vid]
        return bool(begun) and any(
            ae is not None and ae["t"] < b["t"] for _, ae in accepting(self.ops, begun[0])
        )

    def damage_near(self, run: str, branch: str, b: dict[str, Any], e: dict[str, Any]) -> bool:
        """The operator damaged (and then repaired: deleted) this ref before the op ended,
        or made it vanish (chaos70: a CAS on it meets no ref)."""
        ref = f"refs/{run}/{branch}"
        vans = [r for r in self.rollbacks if r.kind == VANISH and r.ref == ref]
        return any(r == ref and d0 <= e["t"] for d0, _, r in self.damage) or any(
            r.begin <= e["t"] and b["t"] <= r.end for r in vans
        )

    def swept_before(self, e: dict[str, Any]) -> bool:
        """A sweep (prune, gc, delete_run, a saver's delete or prune) began before ``e``."""
        return any(ob["op"] in SWEEPS and ob["t"] < e["t"] for ob, _ in self.ops)

    def holds_before(self, cid: str, e: dict[str, Any]) -> int:
        """Records that may hold ``cid`` by ``e``: resets away from it, and repairs whose
        acknowledgement says they kept it, begun before."""
        return sum(
            1
            for ob, oe in self.ops
            if ob["t"] < e["t"]
            and (
                (ob["op"] == "reset" and ob.get("old") == cid)
                or (
                    ob["op"] in ("damage", "ref_repair")
                    and oe is not None
                    and oe["ev"] == "a"
                    and cid in (oe.get("retained"), *(oe.get("kept") or ()))
                )
            )
        )

    def released_before(self, cid: str, b: dict[str, Any]) -> bool:
        """An earlier release of ``cid`` may have committed (a second one finds none)."""
        return any(
            ob["op"] == "release" and ob["cid"] == cid and ob["t"] < b["t"] and ob is not b
            and (oe is None or oe["ev"] == "a" or oe.get("err") in CONNECTION)
            for ob, oe in self.ops
        )  # fmt: skip

    def rerooted(self, run: str, branch: str, b: dict[str, Any]) -> bool:
        """A checkpoint began on ``run``/``branch`` as a root (after the branch was deleted)."""
        return any(
            ob["op"] == "ckpt" and ob.get("run") == run and ob.get("branch") == branch
            and ob.get("parent") is None and ob["t"] < b["t"]
            for ob, _ in self.ops
        )  # fmt: skip

    def deleted(self, b: dict[str, Any], e: dict[str, Any]) -> bool:
        """A CAS lost on a run another worker's ``delete_run`` (begun before the refusal)
        took: the short ``tmp-`` runs are deleted by any worker."""
        run = b.get("run")
        return any(
            ob["op"] == "delete" and ob.get("run") == run and ob["t"] < e["t"] for ob, _ in self.ops
        )

    def decided(self, e: dict[str, Any]) -> bool:
        """A GateError for recording on from a checkpoint whose standing decision is not
        ACCEPT, or a sign-off / gate of a decision a later one superseded (validations
        race on the shared run; docs/decision-table.md): the log shows a validation of
        that checkpoint began before."""
        msg = e.get("msg", "")
        found = re.search(r"at checkpoint ([0-9a-f]{32})", msg)
        if not ("standing decision" in msg or "supersede" in msg) or found is None:
            return False
        c = found.group(1)
        return any(
            ob["op"] == "validate" and c in (ob.get("cid"), ob.get("other")) and ob["t"] < e["t"]
            for ob, _ in self.ops
        )

    def dropped_before(self, b: dict[str, Any], e: dict[str, Any]) -> bool:
        """A batched CAS lost on a ref whose queued checkpoint another commit of this
        process dropped: the recorder still extends the dropped one, so its next queued
        checkpoint conflicts (docs/durability.md "batched": the drop is told at that
        thread's next flush). The log shows it: a checkpoint of that run queued (never
        acknowledged nor refused) before a failed flush or checkpoint of the process ended,
        that failure begun before this refusal (its commit lies between its two lines). Its
        ``x`` line may come after this one: another thread's, written once its call returned
        (tests/test_chaosflake_drop_logged_late.py; the likely cause of a CI run's "refusal
        not allowed: flush ConflictError ... refs/own-w2/main", seed 78224378)."""
        found = re.search(r"at refs/([^/]+)/main\b", e.get("msg", ""))
        if found is None:
            return False
        run, me = found.group(1), (e["w"], e["inc"])
        drops = [
            oe["t"] for ob, oe in self.ops
            if oe is not None and oe["ev"] == "x" and commits_queue(ob)
            and (oe["w"], oe["inc"]) == me and ob["t"] < e["t"] and oe["id"] != e.get("id")
        ]  # fmt: skip
        return any(
            ob["op"] == "ckpt" and ob.get("run") == run and oe is None
            and (ob["w"], ob["inc"]) == me and any(ob["t"] < t for t in drops)
            for ob, oe in self.ops
        )  # fmt: skip


CONNECTION = ("StoreConnectionError", "CommitLostError", "OutcomeUnknownError")


def _committed(e: dict[str, Any] | None) -> bool:
    """chaos_check.may_have_committed (which imports this module): killed, acknowledged,
    a lost connection, or a batched checkpoint relaying another thread's drop."""
    return (
        e is None
        or e["ev"] == "a"
        or e.get("err") in CONNECTION
        or (e.get("op") == "ckpt" and RELAYED in e.get("msg", ""))
    )


def _msg(*parts: str) -> Rule:
    """Allowed when the message holds one of ``parts``."""
    return lambda b, e, c: any(p in e.get("msg", "") for p in parts)


def _raced(b: dict[str, Any], e: dict[str, Any], c: Context) -> bool:
    """A compare-and-set lost on a run every worker writes (the message names its ref)."""
    return any(ref in e.get("msg", "") for ref in RACED)


def commits_queue(b: dict[str, Any]) -> bool:
    """The call commits a batched handle's queue: a checkpoint (one that fills the batch),
    a flush, a close, or a sweep, ref write or push of a batched handle (it flushes
    first)."""
    return b["op"] in ("ckpt", "flush", "close") or (
        bool(b.get("batched")) and b["op"] in QUEUE_FIRST
    )


def _batch(b: dict[str, Any], e: dict[str, Any], c: Context) -> bool:
    """Raced, or a conflict a dropped batch of this process left (Context.dropped_before)."""
    return _raced(b, e, c) or c.dropped_before(b, e)


def _relayed(b: dict[str, Any], e: dict[str, Any], c: Context) -> bool:
    """Another thread's failed batch commit told to this one (docs/durability.md)."""
    return RELAYED in e.get("msg", "")


def _always(b: dict[str, Any], e: dict[str, Any], c: Context) -> bool:
    return True


def _pruned(b: dict[str, Any], e: dict[str, Any], c: Context) -> bool:
    """The message says pruned, and a sweep the log shows began before (before: the
    message alone, which excused a "pruned" refusal nothing had removed)."""
    return "pruned" in e.get("msg", "") and c.swept_before(e)


_NO_RUN = _msg("no such run")


def _gone_first(b: dict[str, Any], e: dict[str, Any], c: Context) -> bool:
    """The operator's damage found no ref: a reset of that fork to None, or a delete of its
    run, began before the repair refused and may have committed before the flip (the
    operator picks the fork, then flips it: a worker's delete can land between)."""
    return any(
        ob.get("run") == b["run"]
        and ob["t"] < e["t"]
        and (
            (ob["op"] == "reset" and ob.get("new") is None and ob.get("branch") == b["branch"])
            or ob["op"] in ("delete", "lgdelete")
        )
        and (oe is None or oe["ev"] == "a" or oe.get("err") in CONNECTION)
        for ob, oe in c.ops
    )


#: op -> class name -> the condition under which the docs allow it (besides the
#: universal ones in the module docstring). An op or class not listed is a defect.
TABLE: dict[str, dict[str, Rule]] = {
    # A recorder's CAS: lost only on a raced run; a fork whose parent was pruned before
    # its first checkpoint (docs/store.md "Recorder and reader": got="pruned").
    "ckpt": {
        "ConflictError": lambda b, e, c: (
            _batch(b, e, c)
            or _pruned(b, e, c)
            or (bool(b.get("pull")) and "swept" in e.get("msg", ""))
            or c.deleted(b, e)
        ),
        "NotFoundError": _pruned,
    },
    # A batched commit: a queued fork checkpoint whose parent a sweep took meanwhile;
    # another thread's failed commit relayed (that thread logged and was judged on it).
    "flush": {"ConflictError": lambda b, e, c: _batch(b, e, c) or _pruned(b, e, c)},
    "close": {"ConflictError": lambda b, e, c: _batch(b, e, c) or _pruned(b, e, c)},
    # fork of an acknowledged base prune may have swept (keep_last of 3-4).
    "fork": {"NotFoundError": _pruned},
    # The contested run is raced; a fork branch only by the operator's damage and repair.
    "reset": {
        "ConflictError": lambda b, e, c: (
            _raced(b, e, c) or c.damage_near(b["run"], b["branch"], b, e)
        ),
        "NotFoundError": _pruned,
    },
    # Forward only: refused when the branch was re-rooted (deleted, then recorded from
    # no parent) or its history pruned ("descent cannot be proven").
    "set_ref": {
        "NotDescendantError": lambda b, e, c: (
            c.rerooted(b["run"], b["branch"], b) or "cannot be proven" in e.get("msg", "")
        ),
        "ConflictError": lambda b, e, c: c.damage_near(b["run"], b["branch"], b, e),
    },
    # op_contest reads the head, then the history: another worker's reset may delete the
    # ref between the two reads (a reset to None is logged with new=None).
    "contest": {
        "NotFoundError": lambda b, e, c: any(
            ob["op"] == "reset"
            and ob.get("run") == "contested"
            and ob.get("new") is None
            and ob["t"] < e["t"]
            for ob, _ in c.ops
        )
    },
    # Naming no holder, of a head the log shows two records may hold (chaos69: the
    # operator's release of its repair's hold, tests/chaos_roles.py).
    "release": {
        "NotFoundError": lambda b, e, c: c.released_before(b["cid"], b),
        "SeveralHoldersError": lambda b, e, c: (
            b.get("holder") is None and c.holds_before(b["cid"], e) >= 2
        ),
    },
    # The operator's damage and repair of a fork (chaos_roles.damage_and_repair): "no such
    # ref" only when the fork may have been deleted first (a false alarm until chaos68's
    # merge met it: pg, own-w1's fork reset to None 15 ms before the flip).
    "damage": {"NotFoundError": _gone_first},
    # The put back of a vanished ref (tests/chaos_vanish.py): "no such ref, and the table
    # passes its digest" only once a rollback's repair accepted the table meanwhile.
    "ref_repair": {"NotFoundError": lambda b, e, c: c.accepted(b)},
    # Required on a healthy ref; while a rollback stands (the table fails its digest) the
    # repair goes on to its bogus target: NotFoundError (tests/chaos_rollback.py).
    "repair": {
        "ConflictError": _msg("passes its check"),
        "NotFoundError": lambda b, e, c: c.digest_failed(b, e),
    },
    "prune": {"NotFoundError": lambda b, e, c: b.get("run") is not None and _NO_RUN(b, e, c)},
    "dry_run": {"NotFoundError": _NO_RUN},
    "delete": {"NotFoundError": _NO_RUN},
    "pin": {},
    "unpin": {},
    # A write from a thread holding a read view when the map must grow (LMDB).
    "audit": {"ReadHeldDuringResizeError": _msg("map must change size")},
    # Its read view of one of the newest acknowledged checkpoints of the own run: batched,
    # another thread's flush commits the queued (unacknowledged) ones, so a prune keeping
    # 3 may take it (tests/test_chaosflake_read_write_pruned.py; before, no row: a defect).
    "read_write": {"NotFoundError": _pruned},
    # A signed resume records from the validated checkpoint, which a sweep may take.
    "validate": {"NotFoundError": _pruned},
    "validate_shared": {"NotFoundError": _pruned},
    # A non-ACCEPT without a sign-off (required). A signed gate (signed_resume) only by a
    # superseded decision (Context.decided), not by any GateError (before: _always).
    "gate": {"GateError": lambda b, e, c: not b.get("signed")},
    "signoff": {"SignOffError": _msg("no sign-off can release")},
    "reuse": {"GateError": _msg("already used")},  # required: a permit allows one resume
    "verify": {},
    "lgput": {"StoreError": _msg("kept moving")},
    "lgwrite": {},
    "lgdelete": {},
    "lgprune": {},
    # The collected conflict (a branch reset here went elsewhere there, the rest copied), or
    # the named race with the worker's own prune of the run (docs/store.md, "Beside the
    # source's retention"; before, a bare NotFoundError the table refused).
    "push": {"ConflictError": _msg("went elsewhere", "swept")},
    "pckpt": {},
    "peer_open": {},
    # Refused while another process compacts it (the compaction variant).
    "open": {"StoreError": _msg("compact")},
    # The reader thread (its reads are never logged): a checkpoint, pin or ancestor a
    # sweep or an unpin took between the pick and the read.
    "read": {"NotFoundError": _always},
    "compact": {"StoreError": _msg("has the store open", "committed", "another process")},
    # RUN@BRANCH~N (tests/chaos_names.py): no such branch only when it may not have existed
    # during the call, no ancestor N back only when a head it may have had is that short,
    # an ancestor pruned only after a sweep (docs/store.md, "Naming checkpoints").
    "resolve": {
        "NotFoundError": lambda b, e, c: (
            _pruned(b, e, c) or name_refusal_allowed(b, e, c.ops, _committed)
        ),
    },
}


def allowed(b: dict[str, Any], e: dict[str, Any], c: Context) -> bool:
    """True when the docs allow ``e`` (an ``x`` or ``err`` line) for operation ``b``."""
    err = e.get("err", "")
    if err in CONNECTION and c.in_restart(b, e):
        return True
    if err == "IntegrityError" and c.damaged_ref(b, e):
        return True
    # Retention and push/pull, and only they, refuse while a ref stands rolled back (its
    # own check holds; the table fails meta/refs_digest): tests/chaos_rollback.py.
    if (
        err == "IntegrityError" and refused_by_digest(b)
        and "meta/refs_digest" in e.get("msg", "") and c.digest_failed(b, e)
    ):  # fmt: skip
        return True
    if err == "IntegrityError" and SHORT in e.get("msg", "") and c.short_create(b, e):
        return True
    # Another thread's batch commit refused so (its own line is judged above), relayed
    # to this thread's checkpoint or flush: the log cuts the relayed message at 300
    # characters, before the refusal's own words. The relayed error is judged as that
    # commit's (as a relayed ConflictError is): only after a vanish began.
    # A drop is owed to the thread until a flush of it waits on another's commit: told
    # late (seed 70042: 1.1 s after the repair, its flush before raised its own conflict).
    if (
        err == "IntegrityError" and commits_queue(b) and _relayed(b, e, c)
        and any(r.kind == VANISH and r.begin < e["t"] for r in c.rollbacks)
    ):  # fmt: skip
        return True
    if (
        err == "ConflictError" and commits_queue(b)
        and conflict_explained(c.rollbacks, b, e, c.ops)
    ):  # fmt: skip
        return True
    if err == "ConflictError" and commits_queue(b) and _relayed(b, e, c):
        return True
    # A batched handle's sweep, ref write or push met its own queue's commit refused as a
    # flush's would be.
    if (
        err == "ConflictError" and b["op"] in QUEUE_FIRST and commits_queue(b)
        and (_batch(b, e, c) or _pruned(b, e, c))
    ):  # fmt: skip
        return True
    if err in ("GateError", "SignOffError") and c.decided(e):
        return True
    if err == "IntegrityError" and neighbour_refused(b, e, c):  # refkey100
        return True
    rule = TABLE.get(b["op"], {}).get(err)
    return rule is not None and rule(b, e, c)


def refusal_problems(ops: list[tuple[dict[str, Any], dict[str, Any] | None]],
                     errs: list[dict[str, Any]]) -> list[str]:  # fmt: skip
    """Every logged refusal the table does not allow, naming op, class and message."""
    c = Context(ops)
    out = [
        f"refusal not allowed: {b['op']} {e['err']}: {e.get('msg', '')[:200]} ({b['id']})"
        for b, e in ops
        if e is not None and e["ev"] == "x" and not allowed(b, e, c)
    ]
    out += [
        f"refusal not allowed: {e['op']} {e['err']} (outside a logged call): "
        f"{e.get('msg', '')[:200]}"
        for e in errs
        if not allowed({"op": e["op"], "t": e["t"], "id": "-"}, e, c)
    ]
    return out


#: The words a refusal by a damaged row beside an absent ref begins with (refkey100;
#: cpstore.store.ref_neighbours.NEIGHBOUR).
NEIGHBOUR = "a damaged ref key may be this ref"


def neighbour_refused(b: dict[str, Any], e: dict[str, Any], c: Context) -> bool:
    """A create or a head read refused because a ref row beside its key fails its check
    (refkey100: docs/store.md, "No ref is created from nothing, nor read as absent, beside
    a row that fails its check"). In chaos only the operator's flip of a fork's check
    (``damage``) makes such a row. Met directly, the message names the damaged row near
    its start, so :meth:`Context.damaged_ref` judges it (within the damage's window).
    Relayed to another thread's checkpoint or flush of a batched handle, it may be told
    at a later flush, after the repair (as a vanish's refused create is: seed 70042), and
    the log's 300 characters may end before the relayed words: allowed once a damage began
    before it was told, when the relayed words are the refusal's or were cut off."""
    msg = e.get("msg", "")
    if not (commits_queue(b) and _relayed(b, e, c)):
        return False
    told = msg.partition("; got ")[2].lstrip("'\"")  # the relayed words, quoted by repr
    cut = len(msg) >= 300 and NEIGHBOUR.startswith(told)
    return (NEIGHBOUR in msg or cut) and any(d0 < e["t"] for d0, _, _ in c.damage)
