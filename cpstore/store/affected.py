"""Which checkpoints a damaged object takes down with it (``cpstore verify``'s "affects").

An object is reached from a checkpoint directly (a manifest field) or through
a chunk index or a log (its payloads). :func:`checkpoints_reaching` walks every
checkpoint once, in one read txn, and says which of the given objects each
one reaches, so an operator knows what a damaged object costs.
"""

from __future__ import annotations

from collections.abc import Iterable

from cpstore.errors import CpstoreError
from cpstore.store.backend import Backend
from cpstore.store.content import objects_of, records_of
from cpstore.store.manifest import decode_manifest, manifest_references
from cpstore.store.model import unpack_checkpoint_value
from cpstore.store.verify import child_kind, children

__all__ = ["Affected", "checkpoints_reaching"]

#: (checkpoint id, run id, branch, step) of a checkpoint that reaches a damaged object.
Affected = tuple[str, str, str, int]


def checkpoints_reaching(backend: Backend, digests: Iterable[bytes]) -> dict[str, list[Affected]]:
    """Hex digest -> every checkpoint reaching that object (sorted by run, branch, step)."""
    wanted = {bytes(d) for d in digests}
    out: dict[str, list[Affected]] = {d.hex(): [] for d in wanted}
    if not wanted:
        return out
    expansions: dict[tuple[bytes, str], frozenset[bytes]] = {}
    with backend.read_txn() as txn:
        objects = objects_of(backend.dbs)
        for cid, value in records_of(backend.dbs).items(txn):
            if value is None:
                continue  # a damaged location: verify names it
            try:
                created, body = unpack_checkpoint_value(value)
                m = decode_manifest(cid, bytes(body), created)
            except CpstoreError:
                continue  # a damaged manifest is verify's own problem, named by its id
            reached: set[bytes] = set()
            for field, digest in manifest_references(m.raw):
                reached.add(bytes(digest))
                kind = child_kind(field)
                if kind is None:
                    continue
                known = expansions.get((digest, kind))
                if known is None:
                    try:
                        known = frozenset(bytes(c) for c in children(txn, objects, field, digest))
                    except CpstoreError:
                        known = frozenset()  # a damaged index or log: its own entry says so
                    expansions[(digest, kind)] = known
                reached |= known
            for d in reached & wanted:
                out[d.hex()].append((cid.hex(), m.run_id, m.branch or "", m.step))
    for entries in out.values():
        entries.sort(key=lambda e: (e[1], e[2], e[3], e[0]))
    return out
