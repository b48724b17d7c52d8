"""The heap's own check for ``verify()``: every location index entry names a heap entry of
its kind and key, and every heap entry is named by an index (content.py's layout).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cpstore.errors import IntegrityError
from cpstore.store.content import Content, uses_heap
from cpstore.store.heap_layout import KIND_OBJECT, KIND_RECORD, SEQ_SIZE
from cpstore.store.model import Problem

__all__ = ["heap_problems"]


def heap_problems(txn: Any, dbs: Mapping[str, Any]) -> list[Problem]:
    """A :class:`Problem` for every heap or location-index entry that is not as written
    (``expected`` and ``got`` as the check that failed gives them).

    Every index entry must name a heap entry carrying its kind and key (its
    bytes are checked by the caller, through :meth:`Content.get`); every heap
    entry must be named by the index of its kind: one no index names is
    garbage (a crash cannot leave one: entry and index row share a txn).
    """
    if not uses_heap(dbs):
        return []
    heap = dbs["heap"]
    out: list[Problem] = []
    named: set[bytes] = set()
    for kind in (KIND_OBJECT, KIND_RECORD):
        content = Content(dbs, kind)
        with txn.cursor(db=content.index) as cur:
            for key, seq in cur:
                k = bytes(key)
                try:
                    content._entry(txn, k, seq)
                except IntegrityError as exc:
                    out.append(
                        Problem(
                            exc.what,
                            exc.where or "",
                            expected=None if exc.expected is None else str(exc.expected),
                            got=None if exc.got is None else str(exc.got),
                        )
                    )
                    # Named all the same when it carries the kind and key (a damaged
                    # frame or hint block): reported once, above, not as garbage too.
                    entry = txn.get(bytes(seq), None, heap) if len(seq) == SEQ_SIZE else None
                    if entry is None or not content._carries(entry, k):
                        continue
                named.add(bytes(seq))
    with txn.cursor(db=heap) as cur:
        for seq, entry in cur:
            loc = bytes(seq)
            if loc in named:
                continue
            at = int.from_bytes(loc, "big") if len(loc) == SEQ_SIZE else loc.hex()
            head = bytes(entry[:18])
            out.append(
                Problem(
                    "a heap entry no location index names (garbage, or a damaged index)",
                    f"heap/{at}",
                    got=head.hex(),
                )
            )
    return out
