"""review69: holds added and released by racing processes while another process prunes.

Each worker records on its own branch, resets the branch away from its head (a hold on
that head) and, every third, releases its own hold; a pruner process runs
``prune(keep_last=1)`` meanwhile, over and over. A prune that began before a hold was
written must not sweep the head the hold names (the sweep reads the retained rows in
its own write txn, under the writer lock on both engines). Invariant: every hold not
released is listed, its head stored, and ``verify()`` is clean; each head is swept once
its last hold is released. Both engines.
"""

from __future__ import annotations

import multiprocessing

from pg_cluster import backend_url  # noqa: F401 - fixture
from test_review68_repair_model import _stored

import cpstore


def _hold(url: str, n: int, base: str) -> tuple[str, str, bool]:
    """Branch ``b<n>`` from ``base``, three checkpoints, reset away to None: a hold on its
    head; every third releases it. Returns (head, the reset's digest, released)."""
    with cpstore.open(url) as st:
        branch = f"b{n}"
        rec = st.recorder("r", branch=branch, parent=base)
        head = ""
        for i in range(3):
            head = rec.checkpoint(i, {"n": n, "i": i})
        reset = st.reset_ref("r", branch, None, expected_old=head, operator=branch, reason="r")
        released = n % 3 == 0
        if released:
            st.release_retained(head, operator=branch, reason="r", holder=reset.digest)
        return head, reset.digest, released


def _prune(url: str, rounds: int) -> int:
    with cpstore.open(url) as st:
        return sum(st.prune(keep_last=1) for _ in range(rounds))


def test_a_prune_racing_holds_never_sweeps_a_held_head(url: str) -> None:
    with cpstore.open(url) as st:
        base = st.recorder("r").checkpoint(0, {"base": 1})
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        pruner = pool.apply_async(_prune, (url, 20))
        got = pool.starmap(_hold, [(url, n, base) for n in range(6)])
        pruner.get()
    with cpstore.open(url) as st:
        standing = {(head, digest) for head, digest, released in got if not released}
        held = {(c, h["audit"]) for c, head in st.retained().items() for h in head["holds"]}
        assert held == standing
        assert all(_stored(st, head) for head, _ in standing)
        assert st.verify().ok
        for head, digest in sorted(standing):
            st.release_retained(head, operator="o", reason="done", holder=digest)
        st.prune(keep_last=1)
        assert not any(_stored(st, head) for head, _, _ in got)
        assert _stored(st, base) and st.verify().ok
