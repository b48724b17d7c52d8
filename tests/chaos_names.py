"""The chaos test's reads by name (tests/test_chaos_mutations.py): ``resolve("RUN@BRANCH~N")``.

* :func:`resolve_by_name`: a worker names a checkpoint of its own run's ``main``, of
  one of its fork branches, of the shared run or of the contested run (reset back and
  away by every worker) as ``RUN@BRANCH~N`` (N of 0-4; sometimes ``RUN@BRANCH`` or the
  empty-branch ``RUN@~N``), logged ``resolve`` with ``run``/``branch``/``n`` and the id.
* :func:`names_hold`: an acknowledged resolve names a checkpoint the log shows at
  depth N of that branch at some time during the call: N parents back (read from the
  store's manifests, or the log's ``parent`` where a sweep took one) from a head the
  branch may have had then, i.e. one a logged operation set (a checkpoint recorded on
  it, a fork, a reset, a set_ref, the operator's rollback to an older head and its
  repair: tests/chaos_rollback.py) that began before the call ended, and that no
  acknowledged move of the branch, begun after it was set, replaced before the call
  began. A checkpoint begun there and never acknowledged (killed, batched) is matched
  by its logged run, branch, parent and state digest.
* :func:`refusal_allowed`: the table's rule (tests/chaos_errors.py) for a resolve's
  NotFoundError: "no such run or branch" only when the branch may not have existed
  during the call (no acknowledged move set it before the call began, or a reset to
  None or the operator's damage and repair, which deletes it, may have stood), "no ancestor
  N back" only when a head it may have had has a shorter chain (a re-rooted contested
  run, a young one). A "pruned" ancestor is the table's ``_pruned``.

This module imports neither tests/chaos_check.py nor tests/chaos_errors.py (both use
it): the caller passes its ``committed`` rule (``chaos_check.may_have_committed``).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from chaos_worker import CONTESTED, SHARED, Worker

import cpstore
from cpstore.errors import NotFoundError

INF = math.inf
Ops = list[tuple[dict[str, Any], dict[str, Any] | None]]
Committed = Callable[[dict[str, Any] | None], bool]
#: cid -> (known, parent): whether the parent is known, and which (None: a root).
ParentOf = Callable[[str], tuple[bool, str | None]]


def resolve_by_name(w: Worker) -> None:
    """Resolve ``RUN@BRANCH~N`` of a branch this worker writes or races, logged."""
    rng = w.rng
    choices = [(w.run, "main"), (SHARED, "main"), (CONTESTED, "main")]
    live = sorted(b for b, f in w.forks.items() if f["heads"])
    if live:
        choices.append((w.run, rng.choice(live)))
    run, branch = rng.choice(choices)
    n, spell = rng.randrange(5), rng.random()
    name = f"{run}@{branch}~{n}"
    if n == 0 and spell < 0.3:
        name = f"{run}@{branch}"
    elif branch == "main" and spell > 0.8:
        name = f"{run}@~{n}"  # an empty branch is main (docs/store.md, "Naming checkpoints")
    oid, cid = w.call("resolve", lambda: w.st.resolve(name), run=run, branch=branch, n=n, name=name)
    w.ack("resolve", oid, cid=cid, run=run, branch=branch, n=n)


@dataclass
class Place:
    """A logged operation that may have set ``run``/``branch``'s head (to ``value``;
    None: deleted it, or an unacknowledged checkpoint ``begun`` whose id was not logged;
    ``opaque``: a move whose target was not logged)."""

    begin: float
    end: float
    value: str | None
    acked: bool
    begun: dict[str, Any] | None = None
    opaque: bool = False


def placements(ops: Ops, run: str, branch: str, committed: Committed) -> list[Place]:
    """Every logged operation that may have set the head of ``run``/``branch``."""
    out: list[Place] = []
    for b, e in ops:
        if b.get("run") != run or b.get("branch") != branch:
            continue
        op, end = b["op"], INF if e is None else float(e["t"])
        acked = e is not None and e["ev"] == "a"
        if op == "damage":  # broken, then repaired: deleted (IntegrityError meanwhile)
            out.append(Place(b["t"], end, None, acked))
        elif op == "vanish":  # deleted outside cpstore, then put back (ref_repair, below)
            if e is None or e.get("written"):
                out.append(Place(b["t"], end, None, acked))
        elif op == "rollback":  # put back to an older head (tests/chaos_rollback.py)
            if e is None or e.get("written"):
                out.append(Place(b["t"], end, b["new"], acked))
        elif op == "ref_repair" and (e is None or committed(e)):  # back to the true head
            out.append(Place(b["t"], end, b.get("new"), acked))
        elif e is not None and not committed(e):
            continue
        elif op == "ckpt" and e is not None and acked:
            out.append(Place(b["t"], end, e["cid"], acked))
        elif op == "ckpt":
            out.append(Place(b["t"], end, None, acked, b))
        elif op == "reset":
            out.append(Place(b["t"], end, b.get("new"), acked))
        elif op in ("fork", "set_ref"):
            key = "cid" if op == "fork" else "new"
            value = e.get(key) if e is not None and acked else None
            out.append(Place(b["t"], end, value, acked, opaque=not acked))
    return out


def candidates(
    places: list[Place], t0: float, t1: float, disp: list[float] | None = None
) -> list[Place]:
    """The placements whose value the head may have held at some time in [t0, t1]: set
    (begun) before ``t1``, and not replaced for sure before ``t0``: by an acknowledged
    move begun after this one ended and acknowledged before ``t0`` (one to the same value
    is a placement of it too, so it may count)."""
    disp = displaced(places) if disp is None else disp
    return [p for i, p in enumerate(places) if p.begin < t1 and disp[i] >= t0]


def displaced(places: list[Place]) -> list[float]:
    """For each placement, when an acknowledged later move replaced it for sure (INF:
    never): the earliest end of an acknowledged one begun after it ended. One sort and a
    suffix minimum, not a pass over the placements for each (a soak's shared run has
    thousands)."""
    acked = sorted((q.begin, q.end) for q in places if q.acked)
    suffix = [INF] * (len(acked) + 1)
    for i in range(len(acked) - 1, -1, -1):
        suffix[i] = min(acked[i][1], suffix[i + 1])
    return [suffix[bisect.bisect_right(acked, (p.end, INF))] for p in places]


def walk(cid: str, n: int, parent_of: ParentOf) -> tuple[str, Any]:
    """``("id", x)``: x is ``cid``'s N-th ancestor; ``("root", j)``: the chain ends j steps
    back (j < n); ``("unknown", None)``: a parent neither the store nor the log knows."""
    for j in range(n):
        known, parent = parent_of(cid)
        if not known:
            return "unknown", None
        if parent is None:
            return "root", j
        cid = parent
    return "id", cid


def _walk_place(p: Place, n: int, parent_of: ParentOf) -> tuple[str, Any]:
    """:func:`walk` from placement ``p``'s value (``"begun"`` at depth 0 of a begun one)."""
    if p.opaque:
        return "unknown", None
    if p.begun is not None:
        if n == 0:
            return "begun", p.begun
        parent = p.begun.get("parent")
        return ("root", 0) if parent is None else walk(parent, n - 1, parent_of)
    return ("absent", None) if p.value is None else walk(p.value, n, parent_of)


def _deletes(p: Place) -> bool:
    """``p`` deleted the ref: a reset to None, the operator's damage and repair."""
    return p.value is None and p.begun is None and not p.opaque


def log_parents(ops: Ops) -> dict[str, str | None]:
    """cid -> parent of every acknowledged checkpoint the log shows."""
    return {
        e["cid"]: b.get("parent")
        for b, e in ops
        if b["op"] == "ckpt" and e is not None and e["ev"] == "a" and "parent" in b
    }


def refusal_allowed(b: dict[str, Any], e: dict[str, Any], ops: Ops, committed: Committed) -> bool:
    """A resolve's NotFoundError the log explains (module docstring); parents from the log."""
    msg, run, branch, n = e.get("msg", ""), b.get("run"), b.get("branch"), b.get("n")
    if run is None or branch is None or not isinstance(n, int):
        return False
    places = placements(ops, run, branch, committed)
    cands = candidates(places, b["t"], e["t"])
    if "no such run or branch" in msg:
        # Set for sure before the call began (an acknowledged move; a checkpoint begun and
        # never acknowledged may have failed: a batched flush drops it), and no deletion
        # may have stood during it (before: any begun checkpoint counted as set, seed 67204).
        existed = any(p.acked and p.value is not None and p.end < b["t"] for p in places)
        return not existed or any(_deletes(p) for p in cands)
    if "no ancestor" in msg:
        known = log_parents(ops)

        def parent_of(cid: str) -> tuple[bool, str | None]:
            return (cid in known), known.get(cid)

        return any(_walk_place(p, n, parent_of)[0] in ("root", "unknown") for p in cands)
    return False


def names_hold(store: cpstore.Store, m: Any, committed: Committed) -> list[str]:
    """Every acknowledged resolve named a checkpoint at depth N of its branch during the
    call (module docstring). ``m`` is a tests/chaos_check.py Model."""
    known = log_parents(m.ops)
    cache: dict[str, tuple[bool, str | None]] = {}

    def parent_of(cid: str) -> tuple[bool, str | None]:
        if cid not in cache:
            try:
                cache[cid] = (True, store.manifest(cid).parent)
            except NotFoundError:  # swept since: the log's parent, if it logged one
                cache[cid] = ((cid in known), known.get(cid))
        return cache[cid]

    def begun_is(cid: str, begun: dict[str, Any]) -> str:
        try:
            mf = store.manifest(cid)
        except NotFoundError:
            return "unknown"
        same = (mf.run_id, mf.branch, mf.state_digest, mf.parent) == (
            begun["run"],
            begun["branch"],
            begun["sd"],
            begun.get("parent"),
        )
        return "id" if same else "no"

    problems: list[str] = []
    places: dict[tuple[str, str], tuple[list[Place], list[float]]] = {}
    for b, a in m.acked("resolve"):
        key = (b["run"], b["branch"])
        if key not in places:
            found = placements(m.ops, *key, committed)
            places[key] = (found, displaced(found))
        x, n, seen = a["cid"], b["n"], []
        found, disp = places[key]
        for p in candidates(found, b["t"], a["t"], disp):
            kind, got = _walk_place(p, n, parent_of)
            if kind == "begun":
                kind, got = begun_is(x, got), x
            seen.append((kind, got))
        if ("id", x) in seen or any(kind == "unknown" for kind, _ in seen):
            continue
        heads = sorted({str(got) for kind, got in seen if kind == "id"})[:6]
        problems.append(
            f"resolve {b.get('name')!r} ({b['id']}) named {x}, not a checkpoint the log shows "
            f"at ~{n} of {key[0]}@{key[1]} during the call (there: {heads})"
        )
    return problems
