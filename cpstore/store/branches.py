"""Ref operations: compare-and-set moves, audited resets, retained heads, listing, history.

The audited repair of a damaged ref or refs digest is :mod:`cpstore.store.ref_repair`.

The ref codec and its checks are :mod:`cpstore.store.refs`; these are the
operations :class:`~cpstore.store.facade.Store` offers on top of it, written
against the :class:`~cpstore.store.backend.Backend` seam.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from cpstore.errors import (
    ConflictError,
    InvalidInputError,
    NotDescendantError,
)
from cpstore.store.audit import append_audit_txn
from cpstore.store.backend import Backend, Txn
from cpstore.store.content import records_of
from cpstore.store.manifest import Manifest
from cpstore.store.model import AuditRecord, check_name, hex_id, parse_id, ref_key, split_ref_key
from cpstore.store.refs import (
    RECORDED,
    SET,
    delete_ref,
    read_ref,
    unpack_ref,
    write_ref,
)
from cpstore.store.retained import add_hold

__all__ = [
    "branches",
    "branches_in",
    "head_of",
    "head_unmoved",
    "history",
    "ref_target",
    "reset_ref",
    "runs",
    "runs_with_branches",
    "set_ref",
    "walk_history",
]


_E = TypeVar("_E")


def head_of(backend: Backend, run_id: str, branch: str = "main") -> str | None:
    """The head checkpoint id of ``run_id``/``branch``, or None (ref check and target verified)."""
    key = ref_key(check_name(run_id, "run_id"), check_name(branch, "branch"))
    with backend.read_txn() as txn:
        return hex_id(backend.head(txn, key))


def head_unmoved(backend: Backend, run_id: str, branch: str, read: str) -> None:
    """ConflictError unless ``run_id``/``branch``'s head is still ``read``.

    For a reader of ``read`` that found it gone: a head is never swept, so
    another writer moved the branch away (and swept it) since; that is the
    branch moving under the caller (retry), not a missing checkpoint.
    """
    now = head_of(backend, run_id, branch)
    if now != read:
        raise ConflictError(
            "the branch moved while its head was read; read the branch again",
            where=f"refs/{run_id}/{branch}",
            expected=read,
            got=now,
        )


def set_ref(
    backend: Backend,
    run_id: str,
    branch: str,
    new: str,
    *,
    expected_old: str | None,
    first: Callable[[], None] | None = None,
) -> None:
    """Compare-and-set a head: move it to ``new`` if it is ``expected_old``.

    Only forward: ``new`` must descend from the current head (or the
    branch must not exist yet), else :class:`NotDescendantError`; moving
    a branch elsewhere or deleting it (``new=None``) is :func:`reset_ref`,
    which is audited and keeps the old history until it is released.
    ``first`` runs once the arguments passed their checks, before the write txn (the
    facade commits a batched handle's queue there: review100).
    """
    key = ref_key(check_name(run_id, "run_id"), check_name(branch, "branch"))
    if new is None:
        raise NotDescendantError(
            "deleting a branch drops its history; use reset_ref(..., None, ...)",
            where=f"refs/{run_id}/{branch}",
            expected="a checkpoint id",
            got=None,
        )
    new_raw = parse_id(new)
    old_raw = None if expected_old is None else parse_id(expected_old, "expected_old")
    if first is not None:
        first()

    def cas(txn: Txn[memoryview]) -> None:
        found = _cas(backend, txn, key, old_raw)
        origin = ref_target(backend, txn, key, new_raw)
        if old_raw is not None:
            _check_descends(backend, txn, key, new_raw, old_raw)
        write_ref(txn, backend.dbs, key, new_raw, origin, old=found)

    backend.write_txn(cas)


def _cas(
    backend: Backend, txn: Txn[memoryview], key: bytes, expected: bytes | None
) -> tuple[bytes, int] | None:
    """The ref as stored (checked), when it names ``expected``; ConflictError otherwise."""
    found = read_ref(txn, backend.dbs, key, layout=backend.layout)
    current = None if found is None else found[0]
    if current != expected:
        run, branch = split_ref_key(key)
        raise ConflictError(
            "ref compare-and-set lost",
            where=f"refs/{run}/{branch}",
            expected=hex_id(expected),
            got=hex_id(current),
        )
    return found


def ref_target(backend: Backend, txn: Txn[memoryview], key: bytes, cid: bytes) -> int:
    """The origin a ref ``key`` -> ``cid`` gets; InvalidInputError for another run."""
    run, branch = split_ref_key(key)
    m = backend.load_manifest(txn, cid, verify=True)
    if m.run_id != run:
        raise InvalidInputError(
            "a ref can only point at a checkpoint of its own run",
            where=f"refs/{run}/{branch}",
            expected=run,
            got=m.run_id,
        )
    return RECORDED if m.branch == branch else SET


def _check_descends(
    backend: Backend, txn: Txn[memoryview], key: bytes, cid: bytes, ancestor: bytes
) -> None:
    """NotDescendantError unless ``ancestor`` is ``cid`` or on its parent chain.

    A chain that reaches a link no longer stored (pruned, or missing) is
    refused too, but says so: past that link descent can be neither proven
    nor refuted, and the caller needs reset_ref, not a wrong reason.
    """
    run, branch = split_ref_key(key)
    cps = records_of(backend.dbs)
    at: bytes | None = cid
    while at is not None:
        if at == ancestor:
            return
        if not cps.exists(txn, at):
            pruned = txn.get(at, None, backend.db("tombstones")) is not None
            raise NotDescendantError(
                "descent cannot be proven: the checkpoint's history is "
                f"{'pruned' if pruned else 'missing (not pruned)'} at {at.hex()}; "
                "use reset_ref to move the branch",
                where=f"refs/{run}/{branch}",
                expected=f"a descendant of {ancestor.hex()}",
                got=cid.hex(),
            )
        parent = backend.load_manifest(txn, at, verify=True).parent
        at = None if parent is None else bytes.fromhex(parent)
    raise NotDescendantError(
        "the checkpoint does not descend from the branch head; "
        "use reset_ref to move a branch back or sideways",
        where=f"refs/{run}/{branch}",
        expected=f"a descendant of {ancestor.hex()}",
        got=cid.hex(),
    )


def reset_ref(
    backend: Backend,
    run_id: str,
    branch: str,
    new: str | None,
    *,
    expected_old: str | None,
    operator: str,
    reason: str,
    guard: Callable[[Txn[memoryview]], None] | None = None,
    first: Callable[[], None] | None = None,
) -> AuditRecord:
    """Move a head anywhere in its run (or delete it, ``new=None``), audited.

    In one write txn: the CAS on ``expected_old``, a ``ref_reset`` audit
    record naming the operator and reason, and the old head kept as a
    retention root (its whole history survives ``prune``) until
    :func:`release_retained` lets it go. Returns the audit record.
    ``guard`` (the caller's condition) runs first in that txn; what it raises
    (ConflictError) refuses the reset. ``first``: as :func:`set_ref`'s.
    """
    key = ref_key(check_name(run_id, "run_id"), check_name(branch, "branch"))
    new_raw = None if new is None else parse_id(new)
    old_raw = None if expected_old is None else parse_id(expected_old, "expected_old")
    who = check_name(operator, "operator")
    why = check_name(reason, "reason")
    when = float(backend.now())
    if first is not None:
        first()

    def reset(txn: Txn[memoryview]) -> AuditRecord:
        if guard is not None:
            guard(txn)
        found = _cas(backend, txn, key, old_raw)
        origin = None if new_raw is None else ref_target(backend, txn, key, new_raw)
        record = append_audit_txn(
            backend,
            txn,
            "ref_reset",
            {
                "run": run_id,
                "branch": branch,
                "old": hex_id(old_raw),
                "new": hex_id(new_raw),
                "operator": who,
                "reason": why,
            },
            when,
        )
        if old_raw is not None and old_raw != new_raw:
            # A hold beside any other on that checkpoint (another reset's, a repair's).
            add_hold(
                txn, backend.db("meta"), old_raw, run=run_id, branch=branch, audit=record.digest
            )
        if new_raw is None or origin is None:
            delete_ref(txn, backend.dbs, key)
        else:
            write_ref(txn, backend.dbs, key, new_raw, origin, old=found)
        return record

    result: AuditRecord = backend.write_txn(reset)
    return result


def runs(backend: Backend, *, limit: int | None = None) -> list[str]:
    """Run ids that have at least one ref, in sorted order."""
    with backend.read_txn() as txn:
        return _runs(backend, txn, limit)


def runs_with_branches(backend: Backend, *, limit: int | None = None) -> dict[str, dict[str, str]]:
    """Run id -> :func:`branches`, every run of :func:`runs`, all in one read txn (a run
    another process deletes meanwhile is listed whole, or not at all: never branchless)."""
    with backend.read_txn() as txn:
        return {run: branches_in(backend, txn, run) for run in _runs(backend, txn, limit)}


def _runs(backend: Backend, txn: Txn[memoryview], limit: int | None) -> list[str]:
    out: list[str] = []
    with txn.cursor(db=backend.db("refs")) as cur:
        checked = backend.layout_in(txn) != 1
        found = cur.first()
        while found and (limit is None or len(out) < limit):
            if checked:
                unpack_ref(cur.key(), cur.value())  # a damaged key names no run
            run, _ = split_ref_key(cur.key())
            out.append(run)
            found = cur.set_range(run.encode("utf-8", "surrogatepass") + b"\x01")
    return out


def branches(backend: Backend, run_id: str) -> dict[str, str]:
    """Branch name -> head checkpoint id for ``run_id``."""
    check_name(run_id, "run_id")
    with backend.read_txn() as txn:
        return branches_in(backend, txn, run_id)


def branches_in(backend: Backend, txn: Txn[memoryview], run_id: str) -> dict[str, str]:
    """:func:`branches` in the caller's txn (read or write)."""
    prefix = ref_key(check_name(run_id, "run_id"), "x")[:-1]
    out: dict[str, str] = {}
    with txn.cursor(db=backend.db("refs")) as cur:
        keys: list[bytes] = []
        found = cur.set_range(prefix)
        while found and bytes(cur.key()).startswith(prefix):
            keys.append(bytes(cur.key()))
            found = cur.next()
    for key in keys:
        head = backend.head(txn, key)
        if head is not None:
            out[split_ref_key(key)[1]] = head.hex()
    return out


def walk_history(
    backend: Backend,
    run_id: str,
    branch: str,
    limit: int | None,
    load: Callable[[Txn[memoryview], bytes], tuple[_E, str | None]],
) -> list[_E]:
    """``load(txn, cid)`` of each checkpoint from the head of ``branch`` back, in one read txn.

    ``load`` returns the entry and its manifest's parent (hex or None). The
    walk stops at ``limit``, at a run's first checkpoint or at a pruned one.
    """
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise InvalidInputError("limit must be a non-negative int or None", got=limit)
    key = ref_key(check_name(run_id, "run_id"), check_name(branch, "branch"))
    out: list[_E] = []
    with backend.read_txn() as txn:
        cps = records_of(backend.dbs)
        cid = backend.head(txn, key)
        while cid is not None and (limit is None or len(out) < limit):
            if not cps.exists(txn, cid):
                break  # pruned: history ends here
            entry, parent = load(txn, cid)
            out.append(entry)
            cid = None if parent is None else bytes.fromhex(parent)
    return out


def history(
    backend: Backend,
    run_id: str,
    branch: str = "main",
    *,
    limit: int | None = None,
    verify: bool = True,
) -> list[Manifest]:
    """Manifests from the head of ``branch`` back through parents, newest first.

    The walk stops at ``limit``, at a run's first checkpoint or at a pruned one.
    """

    def load(txn: Txn[memoryview], cid: bytes) -> tuple[Manifest, str | None]:
        m = backend.load_manifest(txn, cid, verify=verify)
        return m, m.parent

    return walk_history(backend, run_id, branch, limit, load)
