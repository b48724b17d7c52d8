"""The chaos test's checks of acknowledged ref moves and sweeps (tests/test_chaos_mutations.py).

* :func:`refs_hold`: an acknowledged ``fork`` or ``set_ref`` is what its branch
  holds when the store is read (after each kill and at the end), unless an operation
  the log shows could have moved the branch since: a checkpoint on it, a reset, a
  later ``set_ref``, the operator's damage and repair (which deletes the ref), a
  ``delete_run``. Even then the head must be one of the values those left: an
  acknowledged checkpoint's id, a checkpoint holding a begun one's state, a reset's or
  set_ref's target, or no ref where a deletion was logged. Before, neither was checked.
* :func:`prunes_hold`: every checkpoint an acknowledged ``gc`` reported removed is
  gone (unless a pull may have brought it back) and was neither a retained head an
  acknowledged reset kept and no release freed, nor an acknowledged checkpoint the
  log cannot explain being swept (``Model.removable``); ``prune``'s count is a
  non-negative int and ``gc``'s equals its list. Before, removed counts were unchecked.
* tests/chaos_names.py's :func:`~chaos_names.names_hold`: an acknowledged
  ``resolve("RUN@BRANCH~N")`` named a checkpoint the log shows at depth N of that branch
  during the call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from chaos_check import damage_holds, frees, may_have_committed
from chaos_names import names_hold

import cpstore
from cpstore.errors import CpstoreError, NotFoundError

#: Where an acknowledged fork / set_ref logs the head it set.
_TARGET = {"fork": "cid", "set_ref": "new"}


def _moves(m: Any, run: str, branch: str, b0: dict[str, Any]) -> list[tuple[Any, Any]]:
    """Operations that could have moved ``run``/``branch`` after ``b0`` began (not
    ``b0``): a refused one moved nothing, unless its outcome is unknown."""
    out = []
    for b, e in m.ops:
        if b is b0 or m.end(e) <= b0["t"]:
            continue
        same = b.get("run") == run and b.get("branch") == branch
        moved = same and b["op"] in ("ckpt", "reset", "set_ref", "fork", "rollback", "ref_repair")
        deleted = b["op"] == "delete" and b.get("run") == run
        if (b["op"] == "damage" and same) or ((moved or deleted) and may_have_committed(e)):
            out.append((b, e))  # (the operator's repair deletes the ref)
        elif same and _left_vanished(m, b, e):
            out.append((b, e))
    return out


def _left_vanished(m: Any, b: dict[str, Any], e: Any) -> bool:
    """A vanish (tests/chaos_vanish.py) the store documents as lost: never put back (no
    acknowledged repair of it) because an acknowledged repair of another ref, begun
    after it, accepted the table without it: its head among that repair's ``kept``, or
    the repair found the table short (:func:`_accepted_short`; the operator's forced
    rollback repair beside a vanish; repair72). The ref then stays gone, by design; the
    acknowledged checkpoints' rule still checks its history is stored."""
    if b["op"] != "vanish" or e is None or e["ev"] != "a" or not e.get("written"):
        return False
    for rb, re_ in m.ops:
        if rb["op"] == "ref_repair" and rb.get("vanish") == b["id"] and _acked(re_):
            return False  # put back: its head is what the put-back set
    return any(
        rb["op"] == "ref_repair" and _acked(re_) and rb["t"] > b["t"]
        and (b["old"] in re_.get("kept", ()) or _accepted_short(re_))
        for rb, re_ in m.ops
    )  # fmt: skip


def _accepted_short(e: dict[str, Any]) -> bool:
    """A repair that found the table short of its count and accepted it as it stood: it
    keeps what the table no longer reaches, the vanished head by name or, when the
    difference names no ref, every tip of the store with its lineage (ci84, seed
    653521893: a vanished fork's head had a child, so it was no tip and not in ``kept``,
    though its history was kept whole; the refs rule read the fork as lost)."""
    refs = e.get("refs") or {}
    return int(refs.get("found", 0)) < int(refs.get("recorded") or 0)


def _acked(e: Any) -> bool:
    return e is not None and e["ev"] == "a"


def _head_allowed(
    store: cpstore.Store, head: str | None, want: str | None, moves: list[Any]
) -> bool:
    """``head`` is ``want`` or a value one of ``moves`` may have left."""
    if head == want:
        return True
    digests = set()
    for b, e in moves:
        if b["op"] in ("damage", "delete", "vanish") and head is None:
            return True  # (a vanish here is one left vanished: _left_vanished)
        if b["op"] in ("reset", "rollback", "ref_repair") and b.get("new") == head:
            return True
        acked = e is not None and e["ev"] == "a"
        if acked and b["op"] in ("set_ref", "fork") and e.get(_TARGET[b["op"]]) == head:
            return True
        if b["op"] in ("set_ref", "fork") and (e is None or e["ev"] != "a"):
            return True  # its target was not logged before it ran (never, here: a kill)
        if b["op"] == "ckpt":
            if e is not None and e["ev"] == "a" and e.get("cid") == head:
                return True
            digests.add(b.get("sd"))
    if head is not None and digests:
        try:
            return store.manifest(head).state_digest in digests
        except CpstoreError:
            return False
    return False


def refs_and_sweeps_hold(store: cpstore.Store, m: Any, later: Callable[[], Any]) -> list[str]:
    """:func:`refs_hold` and :func:`prunes_hold`: the store read for both, then the log
    read once more (``later()``) for both: any move or removal that could explain what
    the reads saw was logged by then (the workers run on). Then the resolves by name
    (:func:`~chaos_names.names_hold`) against that log (manifests never change)."""
    heads, problems = _read_heads(store, m)
    removed = _read_removed(store, m, problems)
    after = later()
    problems += _judge_heads(store, heads, after) + _judge_removed(removed, after)
    return problems + names_hold(store, after, may_have_committed)


def refs_hold(store: cpstore.Store, m: Any, later: Callable[[], Any]) -> list[str]:
    """Every acknowledged fork / set_ref is its branch's head, or a later move explains it.

    ``m`` is the log read before the store's reads, ``later()`` the log read after them.
    """
    heads, problems = _read_heads(store, m)
    return problems + _judge_heads(store, heads, later())


Heads = list[tuple[str, dict[str, Any], dict[str, Any], str | None]]


def _read_heads(store: cpstore.Store, m: Any) -> tuple[Heads, list[str]]:
    heads: Heads = []
    for op in _TARGET:
        for b, a in m.acked(op):
            try:
                heads.append((op, b, a, store.ref(b["run"], b["branch"])))
            except CpstoreError as exc:
                heads.append((op, b, a, f"unreadable: {exc!r}"[:200]))
    return heads, []


def _judge_heads(store: cpstore.Store, heads: Heads, after: Any) -> list[str]:
    problems = []
    for op, b, a, head in heads:
        run, branch, want = b["run"], b["branch"], a[_TARGET[op]]
        moves = _moves(after, run, branch, b)
        if head is not None and head.startswith("unreadable") and moves:
            continue  # the operator's damage of this ref (a move) makes it unreadable
        if not _head_allowed(store, head, want, moves):
            problems.append(
                f"acknowledged {op} not visible: {run}@{branch} should be {want} "
                f"(or what {len(moves)} later moves left), is {head} ({b['id']})"
            )
    return problems


def prunes_hold(store: cpstore.Store, m: Any, later: Callable[[], Any]) -> list[str]:
    """What acknowledged sweeps reported removed is gone, and nothing kept was removed
    (``m``/``later()`` as for :func:`refs_hold`)."""
    problems: list[str] = []
    removed = _read_removed(store, m, problems)
    return problems + _judge_removed(removed, later())


def _read_removed(store: cpstore.Store, m: Any, problems: list[str]) -> dict[str, str | None]:
    """Removed id -> its run when stored now, else None."""
    read: dict[str, str | None] = {}
    for _, a in m.acked("prune"):
        for cid in a.get("ids") or ():
            try:
                read[cid] = store.manifest(cid).run_id
            except NotFoundError:
                read[cid] = None
            except CpstoreError as exc:
                problems.append(f"gc removed {cid}: read now {exc!r}"[:300])
    return read


def _judge_removed(read: dict[str, str | None], m: Any) -> list[str]:
    problems: list[str] = []
    acked_ck = {a["cid"]: (b, a) for b, a in m.acked("ckpt")}
    resets: dict[str, list[dict[str, Any]]] = {}  # retained id -> acknowledged resets of it
    for _, ra in [*m.acked("reset"), *damage_holds(m)]:  # a fork repair's holds too
        resets.setdefault(ra["old"], []).append(ra)
    releases: dict[str, list[tuple[Any, Any]]] = {}  # id -> releases that may have landed
    for xb, xe in m.ops:
        if xb["op"] == "release" and may_have_committed(xe):
            releases.setdefault(xb["cid"], []).append((xb, xe))
    for b, a in m.acked("prune"):
        n, ids = a.get("removed"), a.get("ids")
        if "removed" in a and (not isinstance(n, int) or n < 0):
            problems.append(f"prune {b['id']} reported removed={n!r}")
        if ids is None or not all(cid in read for cid in ids):
            continue  # a prune() (a count only), or acknowledged after the reads
        if n != len(ids) or len(set(ids)) != len(ids):
            problems.append(f"gc {b['id']}: removed={n} but {len(ids)} ids (or repeats)")
        t0, t1 = b["t"], a["t"]
        pulled_after = any(
            pb["op"] == "ckpt" and pb.get("pull") and m.end(pe) > t0 for pb, pe in m.ops
        )
        for cid in ids:
            run = read[cid]
            if run is not None and not (pulled_after and run.startswith("peer-")):
                problems.append(f"gc {b['id']} reported {cid} removed; it is still stored")
            held = [
                ra for ra in resets.get(cid, ())
                if ra["t"] < t0
                and not any(
                    xb["t"] < t1 and m.end(xe) > ra["t"] and frees(xb, xe, ra["digest"])
                    for xb, xe in releases.get(cid, ())
                )
            ]  # fmt: skip
            if held:
                problems.append(f"gc {b['id']} removed {cid}, a retained head not released")
            ck = acked_ck.get(cid)
            if ck is None or ck[1]["t"] >= t0:
                continue
            cb, ca = ck
            # This sweep's own excuse first (keep_last newer on its branch): one pass over
            # the log, not Model.removable's pass per sweep in it.
            if b.get("run") in (None, ca["run"]) and "keep" in b:
                newer = m.newer(ca["run"], ca["branch"], cb["t"], t1, cb["id"])
                if newer >= b["keep"]:
                    continue
            if not m.removable(ca, cb):
                problems.append(
                    f"gc {b['id']} removed acknowledged {cid} ({ca['run']}@{ca['branch']})"
                    " that nothing in the log lets a sweep take"
                )
    return problems
