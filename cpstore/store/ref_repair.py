"""The audited repair of a damaged ref or refs digest, and what it must not forget.

:func:`repair_ref` replaces, deletes or puts back one ref when the store says
something is damaged: the ref fails its check, or the refs table fails
``meta/refs_digest`` (a ref vanished, was added or was changed outside cpstore, or
the digest itself was damaged). The digest is then re-derived, so retention runs
again. The digest cannot say which ref vanished or changed, so a repair that accepts
the table as it stands would let the next sweep take that ref's history:
:func:`~cpstore.store.ref_forgotten.forgotten_heads` finds what the repaired table no
longer reaches and the repair keeps what a damaged ref held as retained heads
(docs/store.md, "Repairing a damaged ref"). The put-back checks (repair72, review73)
are here; the search they share with it is in ``ref_forgotten.py``.
"""

from __future__ import annotations

from cpstore.errors import (
    ConflictError,
    IntegrityError,
    InvalidInputError,
    NotFoundError,
    PutBackMismatchError,
)
from cpstore.native.records import DIGEST_SIZE
from cpstore.store.audit import append_audit_txn
from cpstore.store.backend import Backend, Txn
from cpstore.store.branches import ref_target
from cpstore.store.content import records_of
from cpstore.store.model import (
    AuditRecord,
    check_name,
    hex_id,
    parse_id,
    ref_key,
    split_ref_key,
)
from cpstore.store.ref_forgotten import (
    Forgotten,
    forgotten_heads,
    pair_search,
    reach_all,
    search,
    xor_bytes,
)
from cpstore.store.ref_table import (
    RefsState,
    record_refs_digest,
    refs_state,
    replace_damaged_ref,
)
from cpstore.store.refs import RECORDED, SET, ref_hash, unpack_ref
from cpstore.store.retained import add_hold

__all__ = ["repair_ref"]


def repair_ref(
    backend: Backend,
    run_id: str,
    branch: str,
    new: str | None,
    *,
    operator: str,
    reason: str,
    force: bool = False,
) -> AuditRecord:
    """Replace, delete (``new=None``) or put back a ref when the store says it is damaged.

    The repair path for a damaged ref, which blocks ``prune`` and every CAS, for a
    damaged ``meta/refs_digest`` (which blocks retention, and every ref move when
    malformed), and for a ref that vanished (deleted outside cpstore): refused with
    :class:`ConflictError` when the stored ref passes its check and the refs table its
    digest, and with :class:`NotFoundError` for a ref that is not there when the table
    passes its digest (nothing vanished: ``fork`` makes a branch) or when ``new`` is
    None (nothing to delete). ``new`` must be a stored checkpoint of the run.
    A ref put back while the table is exactly one ref short of a well-formed digest must
    be the one that vanished (its name and head give the digest's XOR difference, alone
    or with one ref changed beside it): another is :class:`PutBackMismatchError`, naming
    the vanished ref when a stored checkpoint and branch name give it (found as
    :func:`forgotten_heads` finds it), nothing written; so is a repair of an intact ref
    (moved, deleted, or at its own head) while such a ref is missing, as it would
    re-derive the digest without it. ``force`` accepts either (recorded: ``forced``, and
    ``overrode``; the check runs when forced too). Elsewhere (several refs short, a
    malformed or missing digest, a ref that fails its check, a difference of zero) the
    put-back is not checked; a repair that leaves the table one ref short keeps the
    recorded XOR while it names that ref (review73).
    This ref's row stored under a damaged key (a row of another key failing its own check
    whose value passes the check under this ref's key) is deleted in the same txn: when
    the ref is absent (review101), and beside the ref intact at its own key (review102: a
    flip where ``ref_neighbours`` does not look, the run started anew), where it lifts
    the ConflictError even when the digest was re-derived over it; its head is kept.
    In one write txn: a ``ref_repair`` audit record (``run``, ``branch``, ``damaged``:
    the stored value in hex, None for a ref put back, ``new``, ``retained``, ``kept``,
    ``moved_from``, ``moved_value``: that row's key and, beside an intact ref, its value,
    ``operator``, ``reason``, ``forced``, ``overrode``: the vanished ref the check named
    when ``force`` lifted its refusal, else None; ``refs``), the new value, the digest
    re-derived, and as retained heads: the checkpoint a damaged value's first 16 bytes
    name, if stored (``retained``), and every checkpoint the repaired table no longer reaches that a
    ref vanished or changed outside cpstore may have held, a moved row's head first
    (``kept``; :func:`forgotten_heads`).
    Returns the record.
    """
    key = ref_key(check_name(run_id, "run_id"), check_name(branch, "branch"))
    new_raw = None if new is None else parse_id(new)
    who = check_name(operator, "operator")
    why = check_name(reason, "reason")
    if not isinstance(force, bool):  # recorded as given: a truthy string is no override
        raise InvalidInputError(
            "force must be True or False", where="force", expected="bool", got=force
        )
    when = float(backend.now())
    where = f"refs/{run_id}/{branch}"

    def repair(txn: Txn[memoryview]) -> AuditRecord:
        before = refs_state(txn, backend.dbs)  # the one read of the digest and the table
        stored: bytes | memoryview | None = txn.get(key, None, backend.db("refs"))
        row = key  # the row repaired: this ref's own, or the one its key was flipped to
        if stored is None:  # a digest re-derived over the moved row holds: looked for too
            row, stored = _moved_row(txn, backend.db("refs"), key) or (key, None)
        damaged = None if stored is None else bytes(stored)
        old_hash: bytes | None = None  # the named ref's full hash, when its check holds
        # This ref's row under a damaged key beside an intact ref at its own key (made
        # where refkey100's check does not look): deleted too, its head kept (review102).
        moved: tuple[bytes, bytes] | None = None
        if damaged is None:
            if new_raw is None:
                raise NotFoundError(
                    "no such ref: there is nothing to delete",
                    where=where,
                    expected="a checkpoint id to put a vanished ref back at",
                    got=None,
                )
            if before.holds:
                raise NotFoundError(
                    "no such ref, and the refs table passes its digest: no ref vanished, "
                    "so there is nothing to put back (fork makes a branch, set_ref moves one)",
                    where=where,
                    expected="a ref that fails its check, or a refs table that fails its digest",
                    got=None,
                )
        else:
            try:
                old_cid, old_origin = unpack_ref(key, damaged)
            except IntegrityError:
                pass
            else:
                old_hash = ref_hash(key, old_cid, old_origin)
                if row == key:
                    moved = _moved_row(txn, backend.db("refs"), key)
                if before.holds and moved is None and row == key:
                    raise ConflictError(
                        "the ref passes its check and the refs table its digest; repair_ref "
                        "only replaces a damaged ref (use set_ref or reset_ref)",
                        where=where,
                        expected="a ref that fails its check",
                        got=damaged.hex(),
                    )
        origin = SET if new_raw is None else ref_target(backend, txn, key, new_raw)
        # Checked when forced too: the record then names the vanished ref ``force`` lifted
        # the refusal over (None: nothing lifted), which ``forced`` alone did not (review73).
        overrode: object = None
        other: Forgotten | None = None  # the other of two vanished, this one put back
        try:
            if damaged is None and new_raw is not None:
                other = _check_put_back(backend, txn, before, key=key, new_raw=new_raw)
            elif old_hash is not None:
                _check_intact(backend, txn, before, key=key, now=old_hash, new_raw=new_raw)
        except PutBackMismatchError as exc:
            if not force:
                raise
            overrode = exc.expected
        keep, keep_moved = (
            _kept_head(backend, txn, value, new_raw) for value in (damaged, moved and moved[1])
        )
        keep_moved = None if keep_moved == keep else keep_moved
        recorded = None if before.recorded is None else before.recorded[1]
        if damaged is None:
            # It fills the hole of a ref vanished (which the digest still counts), or
            # is one more ref (a table not short).
            count = before.found + 1 if recorded is None else recorded + (before.found >= recorded)
        elif recorded is None or old_hash is not None:
            # The ref intact, the digest is what is repaired: its count too (review66);
            # less the moved row of this ref deleted beside it (review102).
            count = before.found - (new_raw is None) - (moved is not None)
        else:
            count = recorded - (new_raw is None)  # carried: a vanished ref stays reported
        if not 0 <= count < 1 << 64:
            # The recorded count is damaged too (below the refs it must count, or past its
            # 8 bytes): the table's own after the change, as for a damaged digest (review68:
            # a dropped ref at a recorded count of 0 ended in struct.error, no repair).
            count = before.found + (damaged is None) - (new_raw is None) - (moved is not None)
        if moved is not None:
            row = moved[0]
        if row != key:  # this ref's row under a damaged key: out, the ref at its own key
            txn.delete(row, db=backend.db("refs"))
        after = replace_damaged_ref(txn, backend.dbs, key, new_raw, origin, count=count)
        if new_raw is not None and old_hash is None:  # a put-back, or a damaged ref replaced
            _carry_missing(backend, txn, before, after, count, other=other)
        kept: list[Forgotten] = []
        if not before.holds:
            adjusted = _expected(
                before,
                key=key,
                damaged=damaged,
                old_hash=old_hash,
                new_raw=new_raw,
                origin=origin,
                moved=None if moved is None else unpack_ref(key, moved[1]),
            )
            kept = forgotten_heads(
                backend,
                txn,
                tuple(dict.fromkeys(d for d in (before.recorded, adjusted) if d is not None)),
                after,
                extra_roots=tuple(k for k in (keep, keep_moved) if k is not None),
                named=(run_id, branch),
            )
        record = append_audit_txn(
            backend,
            txn,
            "ref_repair",
            {
                "run": run_id,
                "branch": branch,
                "damaged": None if damaged is None else damaged.hex(),
                # The damaged key this ref's row was stored under (hex), deleted; None when
                # the row was at its own key (review101).
                "moved_from": None if row == key else row.hex(),
                # That row's value (hex) when it was deleted beside an intact ref at the
                # ref's own key, whose value is ``damaged``; else None (review102).
                "moved_value": None if moved is None else moved[1].hex(),
                "new": hex_id(new_raw),
                "retained": hex_id(keep),
                "kept": [
                    *([] if keep_moved is None else [keep_moved.hex()]),
                    *(k.cid.hex() for k in kept if k.cid != keep_moved),
                ],
                "operator": who,
                "reason": why,
                "forced": force,  # the put-back check lifted (repair72)
                # The vanished ref the check named when ``force`` lifted its refusal
                # ({"run", "branch", "head"}, each None when unnamed); None when it lifted
                # nothing: an exact put-back, or no check applied (review73).
                "overrode": overrode,
                # What the digest recorded and the table held before the repair: fewer
                # found than recorded is a ref vanished; ``kept`` is what it reached.
                "refs": {"recorded": recorded, "found": before.found},
            },
            when,
        )
        meta = backend.db("meta")
        # Each a hold of this record's, beside any other on the checkpoint (holders69).
        for head in (keep, keep_moved):
            if head is not None:
                add_hold(txn, meta, head, run=run_id, branch=branch, audit=record.digest)
        for k in kept:
            add_hold(txn, meta, k.cid, run=k.run, branch=k.branch, audit=record.digest)
        return record

    result: AuditRecord = backend.write_txn(repair)
    return result


def _kept_head(
    backend: Backend, txn: Txn[memoryview], value: bytes | None, new_raw: bytes | None
) -> bytes | None:
    """The checkpoint a replaced ref value's first 16 bytes name, kept as a retained head
    by the repair: None when it is not stored, or is the head the repair puts."""
    named = b"" if value is None else value[:DIGEST_SIZE]
    if (
        len(named) == DIGEST_SIZE
        and named != new_raw
        and records_of(backend.dbs).exists(txn, named)
    ):
        return named
    return None


def _moved_row(txn: Txn[memoryview], refs: object, key: bytes) -> tuple[bytes, bytes] | None:
    """(stored key, value) of the row that is ref ``key`` stored under a damaged key, or
    None: a row of another key that fails its own check while its value passes the check
    computed with ``key`` (8 bytes of XXH3 over the id, origin and key: one flipped bit in
    a key, a row ``ref_neighbours`` refuses creates beside). Its key may be one no name
    encodes to (not UTF-8, its NUL flipped), which no repair could name (review101)."""
    with txn.cursor(db=refs) as cur:
        for k, v in cur:
            stored = bytes(k)
            if stored == key:
                continue
            try:
                unpack_ref(stored, v)
            except IntegrityError:
                try:
                    unpack_ref(key, v)
                except IntegrityError:
                    continue
                return stored, bytes(v)
    return None


def vanished_refs(backend: Backend) -> list[dict[str, str]]:
    """The refs the refs table is missing, each ``{"run", "branch", "head"}``, when the
    digest names them: the table one or two refs short of a well-formed digest, every
    ref passing its check, and the XOR difference the hash of one stored checkpoint and
    branch name of its run (two: their XOR), the refs :func:`repair_ref` accepts back
    unforced. Empty otherwise (none vanished, more did, or the difference names none: a
    fork never recorded on). Read-only; walks the stored checkpoints once when short."""
    with backend.read_txn() as txn:
        before = refs_state(txn, backend.dbs)
        full = _vanished_hash(backend, txn, before)
        if full is not None:
            found = search(reach_all(backend, txn), ({full}, {}))
            named = [] if found is None else [found]
        else:
            diff = _vanished_hash(backend, txn, before, short=2)
            pair = None if diff is None else pair_search(reach_all(backend, txn), diff)
            named = [] if pair is None else list(pair)
    return [{"run": f.run, "branch": f.branch, "head": f.cid.hex()} for f in named]


def _carry_missing(
    backend: Backend,
    txn: Txn[memoryview],
    before: RefsState,
    after: tuple[bytes, int],
    count: int,
    *,
    other: Forgotten | None = None,
) -> None:
    """Keep the recorded XOR when the table stays one ref short of ``count`` and the XOR
    difference after the repair names a ref absent from the table (a stored checkpoint and
    branch name give it): the ref still missing, which the next put-back is then checked
    against (:func:`_check_put_back`). Re-derived, the difference was zero and any
    put-back was accepted: after a damaged ref beside the vanished one was repaired, or
    one of two vanished refs put back (review73). A damaged ref replaced at another head
    than its true one leaves a difference of two refs, which names none: re-derived.
    ``other``: the other of two vanished refs when this put-back was found one of the two
    (:func:`_check_one_of_two`), so still missing though ``search`` may give up before
    it (review77: the digest was then re-derived, and the second put-back unchecked)."""
    if before.recorded is None or count - after[1] != 1:
        return
    diff = xor_bytes(before.recorded[0], after[0])
    if diff == bytes(DIGEST_SIZE):
        return
    found = other if other is not None else search(reach_all(backend, txn), ({diff}, {}))
    refs = backend.db("refs")
    if found is None or txn.get(ref_key(found.run, found.branch), None, refs) is not None:
        return
    record_refs_digest(txn, backend.dbs, before.recorded[0], count)


def _expected(
    before: RefsState,
    *,
    key: bytes,
    damaged: bytes | None,
    old_hash: bytes | None,
    new_raw: bytes | None,
    origin: int,
    moved: tuple[bytes, int] | None = None,
) -> tuple[bytes, int] | None:
    """The (XOR, count) the digest recorded with the repair's own change applied, or None
    when unknowable (a malformed digest; a damaged ref deleted: its true hash is not
    known). A damaged ref replaced is taken to be put back to its true value (which the
    digest holds); a ref put back fills a hole when the table is short."""
    if before.recorded is None:
        return None
    acc, count = before.recorded
    if moved is not None:  # the ref's row under a damaged key, deleted: its true hash out
        acc, count = xor_bytes(acc, ref_hash(key, moved[0], moved[1])), count - 1
    if damaged is not None:
        if old_hash is None and new_raw is None:
            return None
        if old_hash is not None:  # an intact ref moved or deleted: out with its hash
            acc = xor_bytes(acc, old_hash)
            if new_raw is None:
                count -= 1
            else:
                acc = xor_bytes(acc, ref_hash(key, new_raw, origin))
    elif before.found >= count and new_raw is not None:  # a ref added, not a hole filled
        acc, count = xor_bytes(acc, ref_hash(key, new_raw, origin)), count + 1
    return acc, count


def _vanished_hash(
    backend: Backend, txn: Txn[memoryview], before: RefsState, short: int = 1
) -> bytes | None:
    """The full hash of the one ref the table is missing (with ``short=2``: the XOR of
    the two refs' hashes), or None when it cannot be known: the digest malformed or
    missing, the table not exactly ``short`` refs short of its count, the XOR difference
    zero (only the count is off: damaged, or a repair of another ref re-derived the XOR
    without the vanished one), or a ref that fails its check (hashed as stored, its
    true hash unknown: the difference is not the vanished refs')."""
    if before.recorded is None or before.recorded[1] - before.found != short:
        return None
    diff = xor_bytes(before.recorded[0], before.acc)
    if diff == bytes(DIGEST_SIZE):
        return None
    with txn.cursor(db=backend.db("refs")) as cur:
        for k, v in cur:
            try:
                unpack_ref(k, v)
            except IntegrityError:
                return None
    return diff


def _check_put_back(
    backend: Backend,
    txn: Txn[memoryview],
    before: RefsState,
    *,
    key: bytes,
    new_raw: bytes,
) -> Forgotten | None:
    """PutBackMismatchError unless a ref put back (``key`` at ``new_raw``) is the one the
    table is missing, when that one is known (:func:`_vanished_hash`): its name and head
    must give the digest's XOR difference (repair72). Naming another branch, even one
    that never existed, used to lift refs70's refusal: a new recorder on the vanished
    ref's run then started a new root with ``verify()`` clean. A ref changed outside
    cpstore with a true check beside the vanished one makes the difference both: the
    put-back is accepted when the rest names a present ref's true head (a stored
    checkpoint of its run), as :func:`forgotten_heads` names a changed ref."""
    full = _vanished_hash(backend, txn, before)
    puts = [ref_hash(key, new_raw, o) for o in (RECORDED, SET)]
    if full is None:
        return _check_one_of_two(backend, txn, before, key=key, puts=puts, new_raw=new_raw)
    if full in puts:
        return None
    reach = reach_all(backend, txn)
    beside = {
        k: {xor_bytes(xor_bytes(full, p), now) for p in puts} for k, now in reach.present.items()
    }
    if search(reach, (set(), beside)) is not None:
        return None  # the put-back and one ref changed beside it give the difference
    run, branch = split_ref_key(key)
    where = f"refs/{run}/{branch}"
    got = {"run": run, "branch": branch, "head": new_raw.hex()}
    found = search(reach, ({full}, {}))
    if found is None:
        raise PutBackMismatchError(
            "the ref put back is not the one that vanished: the refs table is one ref short "
            "of meta/refs_digest, whose XOR difference no stored checkpoint and branch name "
            "of a run give (a fork never recorded on, or other damage); put back the ref "
            "that vanished, at its head, or pass force=True to accept this one",
            where=where,
            expected={"run": None, "branch": None, "head": None},
            got=got,
        )
    raise PutBackMismatchError(
        f"the ref put back is not the one that vanished: the refs table is one ref short "
        f"of meta/refs_digest, whose XOR difference is refs/{found.run}/{found.branch} at "
        f"{found.cid.hex()}; put that back, or pass force=True to accept this one",
        where=where,
        expected={"run": found.run, "branch": found.branch, "head": found.cid.hex()},
        got=got,
    )


def _check_one_of_two(
    backend: Backend,
    txn: Txn[memoryview],
    before: RefsState,
    *,
    key: bytes,
    puts: list[bytes],
    new_raw: bytes,
) -> Forgotten | None:
    """PutBackMismatchError when the table is exactly two refs short of a well-formed
    digest, two stored checkpoints and branch names give the XOR difference, and the ref
    put back is neither (review73 left the first of two put-backs unchecked: a wrong one,
    then any second, re-derived the digest and lifted refs70's refusal with both refs
    lost). Accepted when the put-back and one nameable ref give the difference, when it
    is one of the two the difference names (both return the other, still missing), and
    when no two refs give it (one of them a fork never recorded on: the put-back may be
    the right one, so it is not refused, as before: None)."""
    diff = _vanished_hash(backend, txn, before, short=2)
    if diff is None:
        return None
    reach = reach_all(backend, txn)
    found = search(reach, ({xor_bytes(diff, p) for p in puts}, {}))
    if found is not None:
        return found  # this put-back and another vanished ref give the difference
    pair = pair_search(reach, diff)
    if pair is None:
        return None
    a, b = pair
    run, branch = split_ref_key(key)
    for mine, theirs in ((a, b), (b, a)):
        if (mine.run, mine.branch, mine.cid) == (run, branch, new_raw):
            # The right one, though ``search`` gave up before the other (its cap counts
            # every name of a run, ``pair_search``'s only the absent ones): review77
            # found it refused, named as one of the two that vanished.
            return theirs
    raise PutBackMismatchError(
        f"the ref put back is not one of the two that vanished: the refs table is two refs "
        f"short of meta/refs_digest, whose XOR difference is refs/{a.run}/{a.branch} at "
        f"{a.cid.hex()} with refs/{b.run}/{b.branch} at {b.cid.hex()}; put those back, or "
        "pass force=True to accept this one",
        where=f"refs/{run}/{branch}",
        expected={
            "run": a.run,
            "branch": a.branch,
            "head": a.cid.hex(),
            "or": {"run": b.run, "branch": b.branch, "head": b.cid.hex()},
        },
        got={"run": run, "branch": branch, "head": new_raw.hex()},
    )


def _check_intact(
    backend: Backend,
    txn: Txn[memoryview],
    before: RefsState,
    *,
    key: bytes,
    now: bytes,
    new_raw: bytes | None,
) -> None:
    """PutBackMismatchError when a repair of an intact ref (``key``, full hash ``now``;
    moved to ``new_raw`` or deleted) would accept a table missing a ref the digest can
    name (:func:`_vanished_hash`): the repair re-derives the digest from the table as it
    stands, which lifts refs70's refusal without the vanished ref back, so a new recorder
    on its run starts a new root (repair72's other route: ``repair_ref("s", "main",
    head_of_s)``, the way to clear a damaged digest, while ``r/main`` is gone). The
    vanished ref is named when a stored checkpoint and branch name give it: its hash is
    the difference, or the difference once this ref's own change is undone."""
    full = _vanished_hash(backend, txn, before)
    if full is None:
        return
    reach = reach_all(backend, txn)
    hashes = {full}
    if new_raw is not None:
        hashes |= {
            xor_bytes(xor_bytes(full, now), ref_hash(key, new_raw, o)) for o in (RECORDED, SET)
        }
    found = search(reach, (hashes, {}))
    run, branch = split_ref_key(key)
    name = (
        "a ref no stored checkpoint and branch name of a run give"
        if found is None
        else f"refs/{found.run}/{found.branch} at {found.cid.hex()}"
    )
    raise PutBackMismatchError(
        f"the refs table is one ref short of meta/refs_digest ({name} vanished), and this "
        "repair of an intact ref would re-derive the digest without it: put the vanished "
        "ref back first, or pass force=True to accept its loss (its history is kept retained)",
        where=f"refs/{run}/{branch}",
        expected={"run": None, "branch": None, "head": None}
        if found is None
        else {"run": found.run, "branch": found.branch, "head": found.cid.hex()},
        got={"run": run, "branch": branch, "head": None if new_raw is None else new_raw.hex()},
    )
