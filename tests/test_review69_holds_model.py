"""review69: a randomized model of retained holds against every sweep, on both engines.

Each episode (a fixed seed) runs random API operations on one run: a checkpoint on a
branch, a fork, ``reset_ref`` away from a head (to another stored checkpoint or
deleting the branch: a hold on the old head), ``release_retained`` naming a holder (or
none, when one holds), ``release_retained_by``, ``prune(keep_last=1 or 2)``, and a held
checkpoint's row truncated behind cpstore's back (a reset away from it is then refused
with IntegrityError, ``release_retained(id)`` drops it whole, ``release_retained_by``
skips it). A model keeps each checkpoint's holders, oldest first. Invariants after
every step: ``retained()`` lists exactly the model's holds in order (none for a
malformed row); after a prune every held
checkpoint's lineage (as stored when it was first held) and every branch head is
stored; ``release_retained`` without a holder on a checkpoint two hold is
``SeveralHoldersError`` and changes nothing; at the end ``verify()`` is clean.
``REVIEW69_SEEDS`` sets the episodes (default 3, about a second each on LMDB).
"""

from __future__ import annotations

import os
import random

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_review68_repair_model import _stored

import cpstore
from cpstore.errors import IntegrityError, NotFoundError, SeveralHoldersError
from cpstore.store.facade import Store

SEEDS = range(int(os.environ.get("REVIEW69_SEEDS", "3")))
STEPS = 40
BRANCHES = ("main", "b1", "b2", "b3")


def _lineage(st: Store, cid: str) -> list[str]:
    """``cid`` and its ancestors, while stored (an earlier prune may have cut it)."""
    out: list[str] = []
    at: str | None = cid
    while at is not None and _stored(st, at):
        out.append(at)
        at = st.manifest(at).parent
    return out


def _episode(st: Store, seed: int) -> None:
    rnd = random.Random(seed)
    model: dict[str, list[str]] = {}  # checkpoint -> holders' audit digests, oldest first
    kept: dict[str, list[str]] = {}  # held checkpoint -> its lineage stored when first held
    broken: set[str] = set()  # held checkpoints whose row was truncated behind cpstore's back
    meta = st.backend.db("meta")
    made: list[str] = [st.recorder("r").checkpoint(0, {"seed": seed})]
    n = 1
    for _ in range(STEPS):
        heads = st.branches("r")
        alive = [c for c in made if _stored(st, c)]
        op = rnd.choice(("cp", "cp", "fork", "reset", "reset", "release", "by", "prune", "damage"))
        if op == "cp" and heads:
            branch = rnd.choice(sorted(heads))
            made.append(st.recorder("r", branch=branch).checkpoint(n, {"n": n, "s": seed}))
            n += 1
        elif op == "fork" and alive:
            free = [b for b in BRANCHES if b not in heads]
            if free:
                st.fork("r", rnd.choice(free), rnd.choice(alive))
        elif op == "reset" and heads:
            branch = rnd.choice(sorted(heads))
            old = heads[branch]
            new = rnd.choice([None, *alive])
            if old in broken and new != old:  # its hold would replace unreadable holds
                with pytest.raises(IntegrityError):
                    st.reset_ref("r", branch, new, expected_old=old, operator="o", reason="m")
                assert st.branches("r") == heads
                continue
            rec = st.reset_ref("r", branch, new, expected_old=old, operator="o", reason="m")
            if new != old and rec.digest not in model.setdefault(old, []):
                model[old].append(rec.digest)
                kept.setdefault(old, _lineage(st, old))
        elif op == "release" and model:
            cid = rnd.choice(sorted(model))
            holders = model[cid]
            if cid in broken:  # dropped whole (audited), or no holder can be named
                if rnd.random() < 0.3:
                    with pytest.raises(NotFoundError):
                        st.release_retained(cid, operator="o", reason="m", holder=holders[0])
                    continue
                st.release_retained(cid, operator="o", reason="m")
                holders.clear()
                broken.discard(cid)
            elif len(holders) > 1 and rnd.random() < 0.3:
                before = st.retained()
                with pytest.raises(SeveralHoldersError):
                    st.release_retained(cid, operator="o", reason="m")
                assert st.retained() == before
                continue
            else:
                pick = len(holders) > 1 or rnd.random() < 0.5
                holder = rnd.choice(holders) if pick else None
                st.release_retained(cid, operator="o", reason="m", holder=holder)
                holders.remove(holder if holder is not None else holders[0])
        elif op == "by" and model:
            digest = rnd.choice(sorted({d for hs in model.values() for d in hs}))
            readable = [hs for c, hs in model.items() if c not in broken and digest in hs]
            if not readable:  # held only in malformed rows: nothing it can release
                with pytest.raises(NotFoundError):
                    st.release_retained_by(digest, operator="o", reason="m")
                continue
            st.release_retained_by(digest, operator="o", reason="m")
            for hs in readable:
                hs.remove(digest)
        elif op == "damage" and set(model) - broken:
            cid = rnd.choice(sorted(set(model) - broken))
            key = b"retained/" + bytes.fromhex(cid)
            with st.backend.read_txn() as txn:
                row = bytes(txn.get(key, None, meta))
            st.backend.write_txn(lambda txn, k=key, v=row[:-3]: txn.put(k, v, db=meta))
            broken.add(cid)
        elif op == "prune":
            st.prune(keep_last=rnd.choice((1, 2)))
            for cid in [*model, *st.branches("r").values()]:
                assert all(_stored(st, c) for c in kept.get(cid, [cid])), (seed, cid)
        model = {c: hs for c, hs in model.items() if hs}
        kept = {c: line for c, line in kept.items() if c in model}
        got = {c: [h["audit"] for h in head["holds"]] for c, head in st.retained().items()}
        assert got == {c: [] if c in broken else hs for c, hs in model.items()}, (seed, op)
    for cid in sorted(broken):  # still reported, then dropped
        assert not st.verify().ok
        st.release_retained(cid, operator="o", reason="malformed")
    assert st.verify().ok


@pytest.mark.parametrize("seed", SEEDS)
def test_holds_follow_the_model(url: str, seed: int) -> None:
    with cpstore.open(url) as st:
        _episode(st, seed)
