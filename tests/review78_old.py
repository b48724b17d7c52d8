"""trim76's replaced expressions as they stood at 60c078b (review78's differential tests
compare the trimmed put path with them): the recorded manifest's ``b"".join``, ``ref_key``'s
two encodes, ``pack_checkpoint_value``'s ``_created_check`` and a ref value's bytes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgpack

from cpstore.native.binding import digest, digest_small
from cpstore.store import manifest_encode as me
from cpstore.store.model import _CREATED


def _enc_digest(value: bytes | None) -> bytes:
    return b"\xc0" if value is None else b"\xc4\x10" + value


def encode_recorded_manifest(
    logs: Mapping[str, Any],
    *,
    run_id: bytes,
    branch: bytes,
    step: int,
    parent: bytes | None,
    state: bytes,
    tokens: bytes,
    ledger_sealed: bool,
    tags: bytes,
    metadata: bytes,
) -> bytes:
    """60c078b's body, verbatim."""
    d, mk = _enc_digest, me._MK
    return b"".join(
        (
            me._MANIFEST_HEAD,
            mk["step"],
            msgpack.packb(step),
            mk["tags"],
            tags,
            mk["state"],
            state,
            mk["branch"],
            branch,
            mk["parent"],
            d(parent),
            mk["run_id"],
            run_id,
            mk["tokens"],
            tokens,
            me._VERSION_PIECE,
            d(logs["effects"]),
            mk["harness"],
            d(logs["harness"]),
            mk["metadata"],
            metadata,
            mk["call_graph"],
            d(logs["call_graph"]),
            mk["transcript"],
            d(logs["transcript"]),
            mk["observations"],
            d(logs["observations"]),
            mk["ledger_sealed"],
            b"\xc3" if ledger_sealed else b"\xc2",
        )
    )


def ref_key(run_id: str, branch: str) -> bytes:
    """60c078b's ``ref_key``."""
    return run_id.encode("utf-8", "surrogatepass") + b"\0" + branch.encode("utf-8", "surrogatepass")


def pack_checkpoint_value(created_at: float, manifest: bytes, cid: bytes | None = None) -> bytes:
    """60c078b's ``pack_checkpoint_value`` (``_created_check`` inlined as it was)."""
    created = _CREATED.pack(created_at)
    key = digest(manifest) if cid is None else cid
    return created + digest_small(bytes(key) + bytes(created))[:8] + manifest


def ref_value(key: bytes, cid: bytes, origin: int) -> bytes:
    """60c078b's ``write_ref`` value (and ``pack_ref``'s)."""
    full = digest_small(b"".join((cid, bytes((origin,)), key)))
    return bytes(cid) + bytes((origin,)) + full[:8]
