"""The chaos test's model of the logs and its checks (tests/test_chaos_mutations.py).

* :class:`Model`: what the workers' logs say the store acknowledged, and which
  logged operation could have removed an acknowledged checkpoint;
* a branch only compare-and-set moves never forks, and its head's chain holds only
  checkpoints a worker began there;
* the audit log's gates and permits follow the standing decision, and a sweep
  that removed a decided checkpoint names it (moved here from the test module);
* every acknowledged LangGraph ``put`` reads back through ``get_tuple`` (its id,
  the values put), and every acknowledged ``put_writes`` is among its tuple's
  pending writes, unless an operation in the log could have removed it;
* the peer store (push/pull) verifies whole, every pushed head is in it and
  verifies, and so does every checkpoint recorded on it.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from chaos_errors import CONNECTION
from chaos_roles import values_digest
from chaos_rollback import DIGEST, SHORT, VANISH, refused_by_digest, rollbacks
from chaos_worker import KEEP, QUEUE_FIRST, SHARED

import cpstore
from cpstore.errors import CpstoreError
from cpstore.langgraph import CpstoreSaver

INF = math.inf


def read_logs(logdir: Path) -> list[dict[str, Any]]:
    """Every complete line of every worker log, in time order."""
    lines: list[dict[str, Any]] = []
    for p in sorted(logdir.glob("w*.log")):
        text = p.read_text()
        for raw in text.split("\n")[:-1]:  # a line cut by a kill has no newline yet
            lines.append(json.loads(raw))
    lines.sort(key=lambda r: r["t"])
    return lines


class Model:
    """What the logs say the store acknowledged and what could have been removed."""

    def __init__(self, lines: list[dict[str, Any]]) -> None:
        begins: dict[str, dict[str, Any]] = {}
        ends: dict[str, dict[str, Any]] = {}
        self.defects = [r for r in lines if r["ev"] == "defect"]
        self.errs = [r for r in lines if r["ev"] == "err"]  # CpstoreErrors outside a call
        for r in lines:
            if r["ev"] == "b":
                begins[r["id"]] = r
            elif r["ev"] in ("a", "x"):
                ends.setdefault(r["id"], r)
        self.ops = [(b, ends.get(i)) for i, b in begins.items()]
        # A saver put's branch is known once acknowledged (the saver picks it); one not
        # acknowledged may be on any branch of its run (None matches every branch).
        self.branch_of = {
            b["id"]: (e["branch"] if e is not None and e["ev"] == "a" else None)
            if b["op"] == "lgput" else b.get("branch")
            for b, e in self.ops
        }  # fmt: skip
        self.acks = [(begins[i], e) for i, e in ends.items() if e["ev"] == "a"]
        # While a ref is damaged (the operator's, below), anything reading it refuses
        # with IntegrityError (docs/store.md, "Every ref read is checked"): not a defect.
        # Only that ref's: any other IntegrityError in the window (an object's hash) is one.
        windows = [
            (b["t"], self.end(e), f"refs/{b['run']}/{b['branch']}")
            for b, e in self.ops
            if b["op"] == "damage"
        ]
        # The operator's rollbacks (tests/chaos_rollback.py): while one stands, retention
        # and push/pull alone refuse, naming meta/refs_digest; its side chain is kept by
        # the repair.
        self.rollbacks = rollbacks(self.ops)
        self.side = {i for r in self.rollbacks for i in r.side}
        windows += [(r.begin, r.end, DIGEST) for r in self.rollbacks]
        # A vanish (tests/chaos_vanish.py): every create refuses, naming the count (SHORT).
        windows += [(r.begin, r.end, SHORT) for r in self.rollbacks if r.kind == VANISH]
        vanished = [r.begin for r in self.rollbacks if r.kind == VANISH]
        self.defects = [
            d
            for d in self.defects
            if not (d.get("err") == "IntegrityError" and relayed_short(d, vanished))
            and not (d.get("err") == "IntegrityError" and any(
                t0 <= d["t"] and d["t"] - 1e9 <= t1 and ref in d.get("tb", "")
                and (ref != DIGEST or refused_by_digest(begins.get(d.get("id", ""), d)))
                for t0, t1, ref in windows
            ))
        ]  # fmt: skip

    def end(self, oid_end: dict[str, Any] | None) -> float:
        """When an operation ended (never, for one a kill cut)."""
        return INF if oid_end is None else float(oid_end["t"])

    def acked(self, op: str) -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(begin, ack) of every acknowledged ``op``."""
        return [(b, a) for b, a in self.acks if b["op"] == op]

    def removable(self, ck: dict[str, Any], begin: dict[str, Any]) -> bool:
        """True when an operation in the log could have removed checkpoint ``ck``."""
        run, branch, t0 = ck["run"], ck["branch"], begin["t"]
        for b, e in self.ops:
            if self.end(e) <= t0:
                continue
            if b["op"] in ("lgdelete", "lgprune") and b["run"] == run:
                return True  # two steps each: one that raised may have removed the entries
            if not may_have_committed(e):
                continue
            if b["op"] == "delete" and b["run"] == run:
                return True
            # Every sweep (a prune of any run, a delete_run) takes what nothing keeps: a
            # fork branch's checkpoints once the retained head keeping them is released.
            fork = branch.startswith(("f", "g"))
            # A saver's delete or prune sweeps the whole store too (retention.delete_run):
            # crash-68005 saw one take a fork head released just before.
            if (
                b["op"] in ("prune", "delete", "lgdelete", "lgprune")
                and fork
                and self.released(run, branch, t0, self.end(e))
            ):
                return True
            pruned = b["op"] == "prune" and b["run"] in (None, run)
            if pruned and self.newer(run, branch, t0, self.end(e), begin["id"]) >= b["keep"]:
                return True
        return False

    def released(self, run: str, branch: str, after: float, before: float) -> bool:
        """A retained head of ``run``/``branch`` released in (after, before), leaving no
        hold on it (chaos69: an acknowledged release with ``left`` holds freed nothing; a
        hold of another branch, a twin's, counts for the branch it sits on, ``home``)."""
        return any(
            b["op"] == "release"
            and b["run"] == run
            and branch in (b["branch"], b.get("home"))
            and self.end(e) > after
            and b["t"] < before
            and may_have_committed(e)  # refused, it released nothing
            and (e is None or e["ev"] != "a" or not e.get("left"))
            for b, e in self.ops
        )

    def newer(self, run: str, branch: str, t0: float, before: float, own: str) -> int:
        """Checkpoints of ``run``/``branch`` that may have committed in (``t0``, ``before``).

        A rollback's side chain (tests/chaos_rollback.py) is not on the true head's line:
        none of it counts, and none of it is swept by a count (the repair retains it)."""
        if own in self.side:
            return 0
        return sum(
            1
            for b, e in self.ops
            if b["op"] in ("ckpt", "lgput")
            and b["run"] == run
            and self.branch_of[b["id"]] in (branch, None)
            and b["id"] != own
            and b["id"] not in self.side
            and b["t"] < before
            and self.end(e) > t0
            and may_have_committed(e)
        )


#: What a batched thread's flush says of its queued checkpoints another thread's failed
#: commit dropped (cpstore/store/batch_owners.py; docs/durability.md, "batched").
RELAYED = "this thread queued were in another thread's batch commit"


def relayed_short(d: dict[str, Any], vanished: list[float]) -> bool:
    """Defect line ``d`` is another thread's batch commit refused by the refs count
    (a create in a vanish, judged on that thread's line), relayed to this thread's
    checkpoint or flush after a vanish began: told at a later flush of it, maybe after
    the repair (seed 70042)."""
    tb = d.get("tb", "")
    return (
        d.get("op") in ("ckpt", "flush", "close", *QUEUE_FIRST) and RELAYED in tb and SHORT in tb
        and any(t0 < d["t"] for t0 in vanished)
    )  # fmt: skip


def frees(b: dict[str, Any], e: dict[str, Any] | None, hold: str) -> bool:
    """The release ``b`` (ended ``e``) may have dropped the hold of audit record ``hold``:
    it may have committed and named that holder, or named none (one hold then, the one
    its acknowledgement says it ``released``). Before chaos69 any release of the head
    counted, so a second hold lost with the first went unseen (holders69)."""
    if b["op"] != "release" or not may_have_committed(e):
        return False
    named = b.get("holder")
    if named is not None:
        return bool(named == hold)
    gone = e.get("released") if e is not None and e["ev"] == "a" else None
    return gone is None or gone == hold


def damage_holds(m: Any) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each head an acknowledged repair of the operator's holds, as a reset's (begin, ack)
    is read: ``old`` the head, ``digest`` the repair's record (chaos69). A fork repair's
    ``retained`` and ``kept``; a rollback's ``kept`` (its ``retained``: rollback_problems)."""
    return [
        (b, {"t": a["t"], "old": cid, "digest": a["digest"], "run": b["run"],
             "branch": b["branch"]})
        for b, a in [*m.acked("damage"), *m.acked("ref_repair")]
        for cid in dict.fromkeys([a.get("retained") if b["op"] == "damage" else None,
                                  *(a.get("kept") or ())])
        if cid is not None
    ]  # fmt: skip


def may_have_committed(end: dict[str, Any] | None) -> bool:
    """An operation that ended so (``None``: killed amid it) may have taken effect: acked,
    killed, or a commit whose connection was lost (a server restart) or whose outcome is
    unknown, either of which may have committed whole (docs/store.md, "Faults").

    Also a batched checkpoint that raised another thread's drop (``RELAYED``): the drop is
    told at the thread's next flush, and a checkpoint that fills the batch flushes, so its
    own batch committed (this checkpoint with it) before the error about earlier ones was
    raised (tests/test_chaos_worker_drops.py)."""
    return (
        end is None
        or end["ev"] == "a"
        or end.get("err") in CONNECTION
        or (end.get("op") == "ckpt" and RELAYED in end.get("msg", ""))
    )


def cas_linear(store: cpstore.Store, m: Any, *, final: bool) -> list[str]:
    """CAS-only branches: no parent with two acked children; the head's chain: only begun ones."""
    problems = []
    # Keyed by era too: a rollback's side chain (tests/chaos_rollback.py) may give the
    # older head a second acknowledged child, one per rollback, never two in one era.
    era = {i: n for n, r in enumerate(m.rollbacks) for i in r.side}
    children: dict[tuple[str, str | None, int], list[str]] = defaultdict(list)
    begun: dict[str, set[str]] = defaultdict(set)  # run -> state digests begun on its main
    for b, e in m.ops:
        if (
            b["op"] == "ckpt"
            and b["branch"] == "main"
            and (b["run"] == SHARED or b["run"].startswith("own-"))
        ):
            begun[b["run"]].add(b["sd"])
            if e is not None and e["ev"] == "a":
                children[(b["run"], b["parent"], era.get(b["id"], -1))].append(e["cid"])
    for (run, parent, _), kids in children.items():
        if len(set(kids)) > 1:
            problems.append(
                f"a CAS was bypassed on {run}: {parent} has acknowledged children {kids}"
            )
    if final:
        for run, digests in begun.items():
            try:
                chain = store.history(run, limit=min(KEEP))
            except CpstoreError as exc:
                problems.append(f"history of {run}: {exc!r}")
                continue
            for mf in chain:
                if mf.state_digest not in digests:
                    problems.append(f"{run}: head's chain holds {mf.id}, which no worker began")
    return problems


def deletes_hold(store: cpstore.Store, m: Any) -> list[str]:
    """An acknowledged ``delete_run`` / ``gc(delete_run=)`` left its run without a ref
    (unless a checkpoint of it that may have committed ended after the delete began: none
    can, a recorder's compare-and-set fails on a deleted head, but the rule is the model's);
    an acknowledged dry run says it was one. ``m`` is read before the store here."""
    runs = set(store.runs())
    problems = [
        f"run {b['run']} still has refs after an acknowledged delete"
        for b, _ in m.acked("delete")
        if b["run"] in runs
        and not any(
            cb["op"] == "ckpt" and cb["run"] == b["run"] and m.end(ce) > b["t"]
            and may_have_committed(ce)
            for cb, ce in m.ops
        )
    ]  # fmt: skip
    problems += [f"a dry run {b['id']} said it was not one" for b, a in m.acked("dry_run")
                 if not a["dry"]]  # fmt: skip
    return problems


def gates_follow_log(records: list[Any]) -> list[str]:
    """Every resume gate and permit followed the standing decision; a sign-off or permit once."""
    problems: list[str] = []
    latest: dict[str, str] = {}  # checkpoint -> digest of the latest decision about it
    by_digest = {r.digest: r for r in records}
    used: set[str] = set()
    for r in records:
        body = r.body
        if r.kind == "decision":
            recorded = body.get("recorded") or {}
            if recorded.get("checkpoint_id"):
                latest[recorded["checkpoint_id"]] = r.digest
        elif r.kind == "gate" and body.get("gate") == "resume":
            c, dec = body["checkpoint_id"], by_digest[body["decision_audit"]]
            if latest.get(c) != dec.digest:
                problems.append(f"gate {r.index} followed a superseded decision about {c}")
            if dec.body["verdict"] != "ACCEPT":
                so = body.get("sign_off")
                if so is None or so in used or by_digest[so].kind != "signoff":
                    problems.append(
                        f"gate {r.index} passed a {dec.body['verdict']} without a fresh sign-off"
                    )
                used.add(str(so))
        elif r.kind == "resume":
            gate = by_digest[body["permit"]]
            if gate.body["checkpoint_id"] != body["checkpoint_id"] or gate.digest in used:
                problems.append(f"resume {r.index}: permit for another checkpoint, or used twice")
            if latest.get(body["checkpoint_id"]) != gate.body["decision_audit"]:
                problems.append(f"resume {r.index} used a permit a later decision superseded")
            used.add(gate.digest)
    return problems


def gc_names_decided(store: cpstore.Store, m: Any) -> list[str]:
    """A sweep that removed a checkpoint a decision names says so in a ``gc`` audit record."""
    named_by_gc: dict[str, list[int]] = defaultdict(list)
    for r in store.audit_records(kind="gc"):
        for c in r.body["decided"]:
            named_by_gc[c].append(r.index)
    sweeps = [(b["t"], m.end(e)) for b, e in m.ops if b["op"] in ("prune", "delete")]
    problems = []
    for b, a in m.acked("validate"):
        if a.get("digest") is None:
            continue  # not recorded
        rec = store.get_audit(a["digest"])
        if any(f["code"] == "INTEGRITY" for f in rec.body["findings"]):
            continue  # a side was gone when validated: no sweep after the record removed it
        if any(t0 < a["t"] and t1 > b["t"] for t0, t1 in sweeps):
            continue  # a sweep beside the validation may have run before its record
        for c in {a["cid"], a["other"]}:
            try:
                store.manifest(c)
                continue
            except CpstoreError:
                pass
            if not any(j > rec.index for j in named_by_gc[c]):
                problems.append(f"{c} (decision {rec.index}) removed without a gc record naming it")
    return problems


def saver_problems(store: cpstore.Store, m: Any, later: Callable[[], Any]) -> list[str]:
    """Acknowledged puts and writes of the LangGraph saver read back, unless removable.

    ``m`` is the log read before the store's reads, ``later()`` the log read after them:
    any removal that could explain a miss was logged by then.
    """
    problems: list[str] = []
    if store.durability == "batched":
        return problems
    saver = CpstoreSaver(store)
    seen: dict[str, Any] = {}
    missed: list[tuple[Any, Any, str]] = []
    for b, a in m.acked("lgput"):
        conf = {"thread_id": a["thread"], "checkpoint_ns": "", "checkpoint_id": a["cid"]}
        try:
            tup = saver.get_tuple({"configurable": conf})
        except CpstoreError as exc:
            problems.append(f"get_tuple of put {a['cid']} on {a['thread']}: {exc!r}"[:300])
            continue
        seen[a["cid"]] = tup
        if tup is None or tup.checkpoint["id"] != a["cid"]:
            missed.append((b, a, "acknowledged LangGraph put lost"))
        elif values_digest(tup.checkpoint["channel_values"]) != a["vd"]:
            problems.append(f"get_tuple of put {a['cid']} on {a['thread']}: other values")
    puts = {a["cid"]: (b, a) for b, a in m.acked("lgput")}
    for _, a in m.acked("lgwrite"):
        tup, put = seen.get(a["cid"]), puts.get(a["cid"])
        if tup is None or put is None:
            continue
        if (a["task"], "doc", a["value"]) not in list(tup.pending_writes or []):
            missed.append((put[0], put[1], f"acknowledged put_writes lost: {a['task']}"))
    after = later()
    for b, a, why in missed:
        if not after.removable(a, b):
            problems.append(f"{why}: {a['cid']} on {a['thread']}")
    return problems


def peer_problems(peer_path: str, m: Any) -> list[str]:
    """The peer verifies whole; every acknowledged pushed head and peer checkpoint is in it."""
    problems: list[str] = []
    with cpstore.open(peer_path, durability="none") as peer:
        rep = peer.verify()
        problems += [f"peer verify: {p}" for p in rep.problems[:10]]
        for what, key in (("push", "src"), ("pckpt", "cid")):
            for _, a in m.acked(what):
                try:
                    found = [str(p) for p in peer.verify_checkpoint(a[key])]
                except CpstoreError as exc:
                    found = [repr(exc)[:200]]
                if found:
                    problems.append(f"{what} {a[key]} not whole in the peer: {found[:3]}")
                elif what == "pckpt" and peer.manifest(a["cid"]).state_digest != a["sd"]:
                    problems.append(f"peer checkpoint {a['cid']} holds another state")
    return problems
