"""What a repaired refs table no longer reaches, and which ref a digest difference names.

A refs table that fails ``meta/refs_digest`` cannot say which ref vanished or changed:
:func:`forgotten_heads` finds the heads a repaired table no longer reaches (kept as
retained heads by :func:`cpstore.store.ref_repair.repair_ref`), and :func:`reach_all` /
:func:`search` find the ref (a stored checkpoint and a branch name) whose hash the
XOR difference between the digest and the table is (repair72's put-back check).
Split from ``ref_repair.py`` (docs/store.md, "Repairing a damaged ref").
"""

from __future__ import annotations

from typing import NamedTuple

from cpstore.errors import IntegrityError
from cpstore.native.binding import digest_small
from cpstore.native.records import DIGEST_SIZE
from cpstore.store.backend import Backend, Txn
from cpstore.store.content import records_of
from cpstore.store.manifest import decode_manifest
from cpstore.store.model import ref_key, split_ref_key, unpack_checkpoint_value
from cpstore.store.refs import RECORDED, SET, ref_hash, unpack_ref
from cpstore.store.retained import retained_heads

__all__ = [
    "NAME_TRIES",
    "PAIR_TRIES",
    "Forgotten",
    "Reach",
    "forgotten_heads",
    "pair_search",
    "reach_all",
    "search",
    "xor_bytes",
]


class Forgotten(NamedTuple):
    """A checkpoint a repair keeps as a retained head: no ref or retained head reaches it."""

    cid: bytes
    run: str
    branch: str
    """The vanished ref's branch when the digest named it, else the manifest's branch."""


def xor_bytes(a: bytes, b: bytes) -> bytes:
    return (int.from_bytes(a, "little") ^ int.from_bytes(b, "little")).to_bytes(
        DIGEST_SIZE, "little"
    )


def _lineage(backend: Backend, txn: Txn[memoryview]) -> dict[bytes, tuple[bytes | None, str, str]]:
    """Every stored checkpoint a sweep could remove -> (parent, run, branch).

    Records the sweep leaves alone (a damaged location, a manifest that does not hash
    to its id) are left out, as the sweep leaves them out: verify names them.
    """
    out: dict[bytes, tuple[bytes | None, str, str]] = {}
    for cid, value in records_of(backend.dbs).items(txn):
        if value is None:
            continue
        try:
            created, data = unpack_checkpoint_value(bytes(value))
        except IntegrityError:
            continue
        if digest_small(data) != cid:
            continue
        m = decode_manifest(cid, bytes(data), created)
        out[cid] = (None if m.parent is None else bytes.fromhex(m.parent), m.run_id, m.branch)
    return out


def forgotten_heads(
    backend: Backend,
    txn: Txn[memoryview],
    digests: tuple[tuple[bytes, int], ...],
    after: tuple[bytes, int],
    *,
    extra_roots: tuple[bytes, ...] = (),
    named: tuple[str, str] | None = None,
) -> list[Forgotten]:
    """What to keep so a repair that accepts a damaged refs table loses no checkpoint.

    Called after the repair's change, in its txn. ``digests``: the (XOR, count) the
    digest recorded, and that with the repair's own change applied (none when the
    digest was malformed); ``after``: the table's now; ``named``: the (run, branch)
    the repair names.

    The unreachable set U is every stored checkpoint no ref (whole lineage) or
    retained head (or ``extra_roots``) reaches. Between sweeps, U holds only what a
    release made unreachable (the lineage of a released head: the next sweep's to
    remove) and what damage did (a vanished ref's history, the history a ref changed
    outside cpstore no longer reaches). When the table's XOR is what the digest
    recorded, nothing is missing: nothing is kept. When it is one ref short, the
    XOR difference is that ref's full hash; when no ref is short, the difference is
    a changed ref's true hash XOR its hash now. A stored checkpoint with its run and
    a branch name the run uses (its manifests', its refs', the named one) that gives
    the hash names the ref: its head is kept with its lineage, even when another ref's
    lineage reaches it (``prune(keep_last=N)`` keeps only a ref's newest N, and that
    ref may move on) and when it is a retained head already (another record's hold,
    which its holder may release: the repair adds its own); nothing is kept when the
    missing ref is back in the table. Otherwise (several refs missing or changed, a
    name nothing holds, a flipped or malformed digest) the head may be any stored
    checkpoint: every tip of the store (a checkpoint no stored one names as parent)
    is kept, retained or not, which keeps every lineage whole until released.
    A released lineage and a damaged ref's head cannot be told apart there (forks are
    not audited), and a kept head costs a ``release_retained``, a lost one the history.
    """
    reach = reach_all(backend, txn, extra_roots, named)
    if any(acc == after[0] for acc, _ in digests):
        return []  # every ref's hash is in the XOR: none is missing (a count damaged)
    missing: set[bytes] = set()  # the full hash of the one ref missing
    changed: dict[bytes, set[bytes]] = {}  # ref key -> the true full hash, if it changed
    for acc, count in digests:
        diff = xor_bytes(acc, after[0])
        if count - after[1] == 1:
            if diff in reach.present.values():
                return []  # the one ref missing is back in the table
            missing.add(diff)
        elif count == after[1]:
            for key, full in reach.present.items():
                changed.setdefault(key, set()).add(xor_bytes(diff, full))
    if missing or changed:
        found = search(reach, (missing, changed))
        if found is not None:
            # Kept even when another ref's lineage reaches it: prune(keep_last=N) keeps
            # only a ref's newest N, and that ref may move on (review68); and even when
            # it is a retained head already: that hold is another record's, which its
            # holder may release (holders69). Not when this repair retains it anyway.
            return [] if found.cid in extra_roots else [found]
    # Unnamed: its head may be any stored checkpoint, reached or not; every tip of the
    # store covers them all, whatever keep_last a sweep is given (review68: a fork's
    # head inside main's lineage was taken by prune), a retained tip too: its holds are
    # other records', which their holders may release (holders69).
    lineage = reach.lineage
    return [
        Forgotten(cid, lineage[cid][1], lineage[cid][2])
        for cid in _tips(lineage, list(lineage))
        if cid not in extra_roots
    ]


class Reach(NamedTuple):
    """What the refs and retained heads reach, read in one txn (:func:`reach_all`)."""

    lineage: dict[bytes, tuple[bytes | None, str, str]]
    present: dict[bytes, bytes]
    """Ref key -> its full hash, for the refs that pass their check."""
    names: dict[str, set[str]]
    """Run -> the branch names its refs (and the repair) use."""
    reached: set[bytes]
    unreached: list[bytes]


def reach_all(
    backend: Backend,
    txn: Txn[memoryview],
    extra_roots: tuple[bytes, ...] = (),
    named: tuple[str, str] | None = None,
) -> Reach:
    """Every stored checkpoint, and which of them a ref (whole lineage), a retained head
    or one of ``extra_roots`` reaches."""
    lineage = _lineage(backend, txn)
    roots: list[bytes] = []
    present: dict[bytes, bytes] = {}
    names: dict[str, set[str]] = {}
    if named is not None:
        names[named[0]] = {named[1]}
    with txn.cursor(db=backend.db("refs")) as cur:
        refs = [(bytes(k), bytes(v)) for k, v in cur]
    for key, value in refs:
        try:
            cid, origin = unpack_ref(key, value)
        except IntegrityError:
            continue  # a damaged ref reaches nothing here: what it named stays kept
        roots.append(cid)
        present[key] = ref_hash(key, cid, origin)
        run, branch = split_ref_key(key)
        names.setdefault(run, set()).add(branch)
    held = {*extra_roots, *retained_heads(txn, backend.db("meta"))}  # whole lineage kept
    roots.extend(held)
    reached: set[bytes] = set()
    for root in roots:
        at: bytes | None = root
        while at is not None and at in lineage and at not in reached:
            reached.add(at)
            at = lineage[at][0]
    unreached = [cid for cid in lineage if cid not in reached]
    return Reach(lineage, present, names, reached, unreached)


def search(reach: Reach, hashes: tuple[set[bytes], dict[bytes, set[bytes]]]) -> Forgotten | None:
    """The ref whose full hash is one of ``hashes`` (:func:`_named_by`), its head tried
    where it most likely is: a tip of what nothing reaches, then elsewhere there, then
    among what is reached."""
    tips = _tips(reach.lineage, reach.unreached)
    tipped = set(tips)
    rest = [cid for cid in reach.unreached if cid not in tipped]
    return _named_by(reach.lineage, reach.names, hashes, [*tips, *rest, *reach.reached])


def _tips(lineage: dict[bytes, tuple[bytes | None, str, str]], among: list[bytes]) -> list[bytes]:
    """The members of ``among`` no member names as its parent, sorted."""
    parents = {lineage[cid][0] for cid in among}
    return sorted(cid for cid in among if cid not in parents)


#: Hashes :func:`_named_by` tries before giving up (about a second): a store with
#: many branches per run falls back to keeping every tip of the store, not to a long scan.
NAME_TRIES = 1_000_000


def _named_by(
    lineage: dict[bytes, tuple[bytes | None, str, str]],
    names: dict[str, set[str]],
    hashes: tuple[set[bytes], dict[bytes, set[bytes]]],
    among: list[bytes],
) -> Forgotten | None:
    """The ref whose full hash is one of ``hashes`` (any key's, or the given key's): a
    checkpoint of ``among`` (tried in that order) with its run and a branch name the
    run uses, or None (none gives one within :data:`NAME_TRIES`)."""
    anywhere, by_key = hashes
    for _, run, branch in lineage.values():
        names.setdefault(run, set()).add(branch)
    keys = {
        run: [(name, ref_key(run, name)) for name in sorted(given)] for run, given in names.items()
    }
    tries = 0
    for cid in among:
        if tries >= NAME_TRIES:
            return None
        _, run, recorded_on = lineage[cid]
        for name, key in keys[run]:
            full = ref_hash(key, cid, RECORDED if name == recorded_on else SET)
            if full in anywhere or full in by_key.get(key, ()):
                return Forgotten(cid, run, name)
        tries += len(keys[run])
    return None


#: Candidate refs :func:`pair_search` holds before giving up (each a hash and its name,
#: ~200 bytes: ~40 MB at most).
PAIR_TRIES = 200_000


def pair_search(reach: Reach, diff: bytes) -> tuple[Forgotten, Forgotten] | None:
    """Two refs absent from the table whose full hashes XOR to ``diff`` (a table two refs
    short of its digest: the difference is both vanished refs' hashes), each a stored
    checkpoint with its run and a branch name the run uses, tried where
    :func:`search` tries; None when no two such refs give it within
    :data:`PAIR_TRIES` candidates (one of them never recorded on, say)."""
    lineage, names = reach.lineage, reach.names
    for _, run, branch in lineage.values():
        names.setdefault(run, set()).add(branch)
    keys = {
        run: [
            (name, ref_key(run, name))
            for name in sorted(given)
            if ref_key(run, name) not in reach.present
        ]
        for run, given in names.items()
    }
    tips = _tips(lineage, reach.unreached)
    tipped = set(tips)
    among = [*tips, *(c for c in reach.unreached if c not in tipped), *reach.reached]
    seen: dict[bytes, Forgotten] = {}
    for cid in among:
        _, run, recorded_on = lineage[cid]
        for name, key in keys[run]:
            full = ref_hash(key, cid, RECORDED if name == recorded_on else SET)
            other = seen.get(xor_bytes(diff, full))
            here = Forgotten(cid, run, name)
            if other is not None and ref_key(other.run, other.branch) != key:
                return other, here
            seen.setdefault(full, here)
            if len(seen) >= PAIR_TRIES:
                return None
    return None
