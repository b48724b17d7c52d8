"""Naming a checkpoint the way git users do: a full id, a unique prefix, ``RUN@BRANCH~N``.

:func:`resolve` turns what an operator types into one checkpoint id:

* 32 hex characters: that id (it need not exist; the read says so).
* 8 to 31 hex characters: the one stored checkpoint whose id starts with them;
  :class:`InvalidInputError` listing the candidates when more than one does,
  :class:`NotFoundError` when none does. Eight is git's and restic's usual short
  form; shorter prefixes collide too often to be typed safely.
* ``RUN@BRANCH``: the head of that branch; ``RUN@BRANCH~N``: its N-th ancestor
  through parents (``~0`` is the head; N in ASCII digits). A pruned ancestor is
  NotFoundError. Run ids and branch names may hold ``@`` and ``~`` themselves, so a
  name is read every way it splits (at each ``@``; a ``~N`` tail as steps or as part
  of the branch name): the one reading whose branch exists is taken, and more than
  one is :class:`InvalidInputError` listing them, never a silent pick. A ref name
  is taken as typed (surrounding spaces are part of the run or branch name).

The prefix scan is a cursor range over the checkpoint ids (``cloc`` and ``checkpoints``,
keyed by the raw id), so it reads only the matching keys; it uses only the seam's
:class:`~cpstore.store.backend.Txn` (``cursor``), no engine feature.
"""

from __future__ import annotations

from typing import Any

from cpstore.errors import CpstoreError, IntegrityError, InvalidInputError, NotFoundError
from cpstore.native.args import check_text, is_hex
from cpstore.store.backend import Backend
from cpstore.store.content import records_of
from cpstore.store.model import check_name, ref_key
from cpstore.store.ref_table import refs_damage

__all__ = ["MAX_CANDIDATES", "MIN_PREFIX", "resolve"]

#: Shortest id prefix accepted (git's and restic's short ids are 7 to 8 characters).
MIN_PREFIX = 8
#: Candidates listed in an "ambiguous prefix" error.
MAX_CANDIDATES = 10


def resolve(backend: Backend, spec: str) -> str:
    """The checkpoint id ``spec`` names (module docstring); errors say what was tried."""
    if not isinstance(spec, str):
        raise InvalidInputError("a checkpoint must be named by a str", got=type(spec).__name__)
    # A str subclass by its characters, as full_checkpoint_id reads one (review77, review83:
    # its own strip, lower and __contains__ made S(id_a) resolve to id_b).
    spec = str.__str__(spec)
    check_text(spec, "checkpoint")
    text = spec.strip()  # an id has no spaces: a padded one is that id
    low = text.lower()
    if low and is_hex(low):
        if len(low) == 32:
            return low
        if len(low) > 32:
            raise InvalidInputError(
                "a checkpoint id has 32 hex characters", expected="<= 32", got=text
            )
        if len(low) < MIN_PREFIX:
            raise InvalidInputError(
                f"an id prefix needs at least {MIN_PREFIX} hex characters",
                expected=f">= {MIN_PREFIX}",
                got=text,
            )
        return _by_prefix(backend, low)
    if "@" in spec:
        return _by_ref(backend, spec)  # as typed: " a@main" is run " a", never run "a"
    raise InvalidInputError(
        "not a checkpoint name",
        expected=f"a 32-hex id, a prefix of >= {MIN_PREFIX} hex, RUN@BRANCH or RUN@BRANCH~N",
        got=text,
    )


def _by_prefix(backend: Backend, prefix: str) -> str:
    # An odd prefix's last nibble bounds the range too: start at nibble 0 of that byte.
    start = bytes.fromhex(prefix if len(prefix) % 2 == 0 else prefix + "0")
    found: list[str] = []
    with backend.read_txn() as txn:
        for key in records_of(backend.dbs).keys(txn, start):
            hexed = key.hex()
            if not hexed.startswith(prefix):
                break
            found.append(hexed)
            if len(found) > MAX_CANDIDATES:
                break
    if not found:
        raise NotFoundError(
            "no checkpoint id starts with this prefix", where="checkpoints", got=prefix
        )
    if len(found) > 1:
        more = " and more" if len(found) > MAX_CANDIDATES else ""
        raise InvalidInputError(
            "ambiguous checkpoint prefix; give more characters",
            where=prefix,
            expected="one of " + ", ".join(found[:MAX_CANDIDATES]) + more,
            got=f"{len(found)}{'+' if more else ''} checkpoints",
        )
    return found[0]


#: A ``~N`` at or past this reaches past any history (no chain holds 2**63 checkpoints).
_FAR = 2**63


def _steps(count: str) -> int | None:
    """N of a ``~N`` tail: ASCII digits only (``int`` takes other scripts' digits and
    ``str.isdigit`` superscripts ``int`` refuses), else None. An N of 20 digits or more
    (leading zeros aside) is read as :data:`_FAR`, never converted: ``int`` refuses more
    than 4,300 digits, and ``RUN@BRANCH~`` and 5,000 ones raised a bare ValueError
    (review83)."""
    if not (count.isascii() and count.isdigit()):
        return None
    digits = count.lstrip("0")
    return min(int(digits or "0"), _FAR) if len(digits) < 20 else _FAR


def _readings(text: str) -> list[tuple[str, str, int]]:
    """Every (run, branch, steps) ``text`` can mean: split at each ``@``, the rest
    taken whole as the branch or, when it ends in ``~N``, as BRANCH~N; an empty
    branch is ``main``. Readings whose names are not valid are left out."""
    out: list[tuple[str, str, int]] = []
    for at, char in enumerate(text):
        if char != "@":
            continue
        run, rest = text[:at], text[at + 1 :]
        head, tilde, count = rest.rpartition("~")
        steps = _steps(count) if tilde else None
        parts = [(rest, 0)] + ([] if steps is None else [(head, steps)])
        for branch, n in parts:
            try:
                out.append((check_name(run, "run_id"), check_name(branch or "main", "branch"), n))
            except InvalidInputError:
                continue
    return out


def _shown(steps: int) -> int | str:
    return f">= {_FAR}" if steps >= _FAR else steps


def missing_ref(backend: Backend, txn: Any, where: str) -> CpstoreError:
    """No ref reads ``where`` (RUN@BRANCH): NotFoundError, unless the refs table fails its
    checks or its digest in ``txn`` (cli99): a ref whose key bytes were flipped, or one
    that vanished, read as "no such run or branch" (exit 4), sending the operator to look
    for a typo in a damaged store. The digest cannot say which ref vanished, so this name
    may be it: IntegrityError. Walks the refs table, on this error's path only."""
    if backend.layout_in(txn) >= 2:  # a layout-1 store's refs carry no checks, no digest
        damage = refs_damage(txn, backend.dbs)
        if damage is not None:
            return IntegrityError(
                f"no ref reads {where}, and the store's refs fail their checks "
                f"({damage.what}): this ref may be the damaged one; verify names the "
                "damage, repair_ref mends it",
                where=damage.where,
                expected=damage.expected,
                got=damage.got,
            )
    return NotFoundError("no such run or branch", where=where)


def _lost_parent(exc: NotFoundError, child: bytes, text: str) -> CpstoreError:
    """The parent a stored (hash-checked) checkpoint names is not stored: damage unless a
    tombstone says retention pruned it (``exc`` says "pruned"; docs/store.md, "Damaged
    records and retention"); before cli99 a lost one was "no such checkpoint", exit 4."""
    if "pruned" in exc.what:
        return exc
    return IntegrityError(
        f"parent checkpoint does not resolve (no tombstone says it was pruned), walking {text}",
        where=f"checkpoints/{child.hex()}",
        expected="the parent stored, or pruned",
        got=f"{exc.what}: {exc.got}",
    )


def _by_ref(backend: Backend, text: str) -> str:
    run_id, _, rest = text.rpartition("@")
    head, tilde, count = rest.rpartition("~")
    with backend.read_txn() as txn:
        found = [
            (run, branch, steps, cid)
            for run, branch, steps in _readings(text)
            if (cid := backend.head(txn, ref_key(run, branch))) is not None
        ]
        if len(found) > 1:
            raise InvalidInputError(
                "ambiguous checkpoint name: more than one run@branch reads it; "
                "give the checkpoint id",
                where=text,
                expected="one of "
                + ", ".join(f"run {r!r} branch {b!r} ~{n}" for r, b, n, _ in found),
                got=f"{len(found)} readings",
            )
        if not found:
            # Nothing exists: the usual reading's errors (bad N or names, no such branch).
            if tilde and _steps(count) is None:
                raise InvalidInputError(
                    "RUN@BRANCH~N needs a non-negative integer N", where=text, got=count
                )
            branch = head if tilde else rest
            check_name(run_id, "run_id")
            check_name(branch or "main", "branch")
            raise missing_ref(backend, txn, f"{run_id}@{branch or 'main'}")
        run_id, branch, steps, cid = found[0]
        child = cid
        for n in range(steps):
            try:
                parent = backend.load_manifest(txn, cid, verify=True).parent
            except NotFoundError as exc:
                raise _lost_parent(exc, child, text) if n else exc from None
            if parent is None:
                raise NotFoundError(
                    f"{run_id}@{branch} has no ancestor {_shown(steps)} back",
                    where=text,
                    expected=f"<= {n}",
                    got=_shown(steps),
                )
            child, cid = cid, bytes.fromhex(parent)
        if steps:
            # The ancestor named must be stored (or pruned): its child's hash-checked
            # manifest names it, so a lost one is damage here, not a reader's "no such
            # checkpoint" later (cli99). Its hash is the reader's to check.
            try:
                backend.load_raw(txn, cid, verify=False, full=False)
            except NotFoundError as exc:
                if "pruned" not in exc.what:  # a pruned one is named: its read says so
                    raise _lost_parent(exc, child, text) from None
    return bytes(cid).hex()
