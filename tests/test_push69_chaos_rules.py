"""push69: the chaos checker allows a push or pull refused by the refs digest, in a rollback.

Push and pull now move no ref of a store whose refs table fails ``meta/refs_digest``
(docs/store.md, "push and pull"): the chaos mix's pushes (the worker's store is the
source) and pulls (its destination) meet the operator's rollbacks and are refused
naming the digest. The checker allowed that refusal for retention alone, so it would
have reported each one as a wrong error; now it allows it for push and pull too, only
while a rollback stands, and still for no checkpoint, fork or reset; and a push or pull
that landed wholly inside a rollback is now reported, as a sweep there is.
"""

from __future__ import annotations

from typing import Any

import pytest
from chaos_check import Model
from chaos_errors import Context, allowed
from chaos_rollback import transfer_problems
from test_chaos68_rollback import DIGEST_MSG, RUN, _lines, _ops, _refusal

PUSH_MSG = (
    "the source store's refs fail their checks (refs table does not match its digest: a "
    "ref or the digest changed outside cpstore): push and pull move no ref; verify names "
    "the damage, repair_ref mends it; at meta/refs_digest; expected '5 refs, digest ...'"
)


@pytest.mark.parametrize(
    ("rolled", "op", "span", "fields", "ok"),
    [
        (True, "push", (22, 25), {}, True),  # the source (the worker's store) rolled back
        (True, "ckpt", (22, 25), {"pull": True}, True),  # a pull into it
        (True, "push", (39, 45), {}, True),  # overlapping the repair
        (False, "push", (22, 25), {}, False),  # no rollback: the digest held
        (True, "push", (50, 51), {}, False),  # begun after the repair
        (True, "ckpt", (50, 51), {"pull": True}, False),
        (True, "ckpt", (22, 25), {}, False),  # a checkpoint still never refuses so
    ],
)
def test_a_transfer_refused_by_the_refs_digest(
    rolled: bool, op: str, span: tuple[int, int], fields: dict[str, Any], ok: bool
) -> None:
    ops = _ops(rolled)
    for msg in (DIGEST_MSG, PUSH_MSG):
        b, e = _refusal(op, *span, "IntegrityError", msg, run=RUN, branch="main", **fields)
        assert allowed(b, e, Context([*ops, (b, e)])) is ok


@pytest.mark.parametrize(
    ("fields", "at", "kept"),
    [
        ({"pull": True}, 22, False),  # a pull refused while the rollback stood: allowed
        ({}, 22, True),  # a checkpoint's IntegrityError by the digest: still a defect
        ({"pull": True}, 5 * 10**9, True),  # refused after the repair (and its 1 s slack)
    ],
)
def test_a_pulls_integrity_defect_line_is_judged_by_its_operation(
    fields: dict[str, Any], at: int, kept: bool
) -> None:
    """The worker also logs each IntegrityError as a ``defect`` line (op, id, traceback;
    not ``pull``): the checker finds the operation by its id to tell a pull's ``ckpt``."""
    rows = [
        ({"t": 20, "op": "rollback", "id": "9", "run": RUN, "branch": "main", "old": "h" * 32,
          "new": "o" * 32, "line": ["h" * 32]}, {"t": 21, "written": True}),
        ({"t": 40, "op": "ref_repair", "id": "10", "run": RUN, "branch": "main",
          "new": "h" * 32}, {"t": 41}),
    ]  # fmt: skip
    lines = _lines(rows)
    op = {"w": 0, "inc": 0, "op": "ckpt", "id": "p", "run": "peer-w0-0", "branch": "main"}
    lines += [
        {"ev": "b", "t": at, **op, **fields},
        {"ev": "x", "t": at + 1, **op, "err": "IntegrityError", "msg": PUSH_MSG},
        {"ev": "defect", "t": at + 1, "w": 0, "inc": 0, "op": "ckpt", "id": "p",
         "err": "IntegrityError", "tb": f"cpstore.errors.IntegrityError: {PUSH_MSG}\n"},
    ]  # fmt: skip
    m = Model(sorted(lines, key=lambda r: r["t"]))
    assert bool(m.defects) is kept


@pytest.mark.parametrize(
    ("op", "fields", "span", "flagged"),
    [
        ("push", {}, (22, 25), True),  # landed wholly inside the rollback: push must refuse
        ("ckpt", {"pull": True}, (22, 25), True),  # a pull into the rolled-back store
        ("ckpt", {}, (22, 25), False),  # a checkpoint lands on (the older head's line)
        ("push", {}, (15, 25), False),  # begun before the rollback was written
        ("push", {}, (30, 45), False),  # ended after the repair began
    ],
)
def test_a_transfer_landed_inside_a_rollback_is_reported(
    op: str, fields: dict[str, Any], span: tuple[int, int], flagged: bool
) -> None:
    rows: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"t": 20, "op": "rollback", "id": "9", "run": RUN, "branch": "main", "old": "h" * 32,
          "new": "o" * 32, "line": ["h" * 32]}, {"t": 21, "written": True}),
        ({"t": 40, "op": "ref_repair", "id": "10", "run": RUN, "branch": "main",
          "new": "h" * 32}, {"t": 41}),
        ({"t": span[0], "op": op, "id": "p", "run": RUN, "branch": "main", "src": "h" * 32,
          **fields}, {"t": span[1], "cid": "c" * 32, "copied": 1}),
    ]  # fmt: skip
    problems = transfer_problems(Model(_lines(rows)))
    assert bool(problems) is flagged, problems
