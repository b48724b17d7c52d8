"""The framing of a LangGraph checkpoint head (layout 2), which ``verify()`` checks.

:mod:`cpstore.langgraph` (layout 2, docs/langgraph.md "Checkpoint layouts") keeps
LangGraph's packed ``checkpoint`` and ``metadata`` in the manifest's metadata under
:data:`HEAD_KEY`: the layout byte, the length of the packed checkpoint (uint32
big-endian), then the two packed serde pairs (``type`` NUL ``bytes`` each). The
framing is a byte format of its own, like the index beside it (``lg_index.py``),
so it lives here, where the store's ``verify()`` can check it without importing
the LangGraph room (docs/architecture.md: ``store`` sits below ``langgraph``).
Decoding the pairs needs the saver's serde, which the store does not hold: the
saver's reads turn a serde's refusal into :class:`IntegrityError`
(``cpstore.langgraph._codec``).
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any

from cpstore.errors import CpstoreError, FormatVersionError, IntegrityError
from cpstore.store.backend import Txn
from cpstore.store.lg_index import CHECKPOINT_PREFIX, checkpoint_key, scan, unpack
from cpstore.store.model import Problem

__all__ = [
    "HEAD_KEY",
    "HEAD_LAYOUT",
    "LG_RUN_PREFIX",
    "check_head",
    "head_problem",
    "split_head",
    "split_pair",
]

#: The manifest metadata key holding a layout-2 checkpoint's head.
HEAD_KEY = "lg"
#: The LangGraph checkpoint layout the head's first byte names.
HEAD_LAYOUT = 2
#: The prefix of every cpstore run a LangGraph saver records on (``_codec.run_for``).
LG_RUN_PREFIX = "lg:"
_HEAD_LEN = struct.Struct(">BI")


def split_pair(part: Any, where: str) -> tuple[str, bytes]:
    """The ``(type, bytes)`` serde pair a packed part holds (``type`` NUL ``bytes``).

    IntegrityError when it is not bytes, has no NUL, or its type tag is not UTF-8 (the
    writer packs a str tag as UTF-8, so none of these was written).
    """
    if isinstance(part, (bytes, bytearray, memoryview)):
        raw = bytes(part)
        cut = raw.find(b"\x00")
        if cut >= 0:
            try:
                return raw[:cut].decode("utf-8"), raw[cut + 1 :]
            except UnicodeDecodeError:
                raise IntegrityError(
                    "a LangGraph value's serde type tag is not UTF-8",
                    where=where,
                    expected="a UTF-8 type tag, NUL, the serde's bytes",
                    got=raw[:cut],
                ) from None
        raise IntegrityError(
            "a LangGraph value is not a serde pair",
            where=where,
            expected="a type tag, NUL, the serde's bytes",
            got=raw[:32],
        )
    raise IntegrityError(
        "not a LangGraph value part", where=where, expected="bytes", got=type(part).__name__
    )


def split_head(head: Any, where: str) -> tuple[bytes, bytes]:
    """The packed ``checkpoint`` and ``metadata`` serde pairs of a layout-2 head.

    IntegrityError when it is not bytes or its framing is wrong (a length past its
    end); FormatVersionError for a layout byte this release does not know (a later
    release's head: never misread). Whether each half is a serde pair is checked where
    it is decoded (:func:`split_pair`, through ``_codec.unpack_typed``), so a read pays
    for it once; :func:`check_head` (``verify()``) checks it here.
    """
    if type(head) is not bytes or len(head) < _HEAD_LEN.size:
        raise IntegrityError(
            "a LangGraph checkpoint head is malformed",
            where=where,
            expected=f"bytes of at least {_HEAD_LEN.size}",
            got=type(head).__name__ if type(head) is not bytes else len(head),
        )
    layout, n = _HEAD_LEN.unpack_from(head)
    if layout != HEAD_LAYOUT:
        raise FormatVersionError(
            "unknown LangGraph checkpoint layout", where=where, expected=HEAD_LAYOUT, got=layout
        )
    end = _HEAD_LEN.size + n
    if end > len(head):
        raise IntegrityError(
            "a LangGraph checkpoint head is cut short", where=where, expected=end, got=len(head)
        )
    return head[_HEAD_LEN.size : end], head[end:]


def check_head(head: Any, where: Callable[[], str]) -> None:
    """:func:`split_head`'s checks and that each half is a serde pair (``verify()``),
    without copying the halves: a head of the common shape (ASCII type tags) passes in
    a few C-level steps; anything else goes through :func:`split_head` and
    :func:`split_pair`, which raise naming ``where()`` (built only then)."""
    if type(head) is bytes and len(head) >= _HEAD_LEN.size:
        layout, n = _HEAD_LEN.unpack_from(head)
        end = _HEAD_LEN.size + n
        if layout == HEAD_LAYOUT and end <= len(head):
            c1 = head.find(b"\x00", _HEAD_LEN.size, end)
            c2 = head.find(b"\x00", end)
            if (
                c1 >= 0
                and c2 >= 0
                and head[_HEAD_LEN.size : c1].isascii()
                and head[end:c2].isascii()
            ):
                return
    checkpoint, metadata = split_head(head, where())
    split_pair(checkpoint, f"{where()}: head checkpoint")
    split_pair(metadata, f"{where()}: head metadata")


def head_problem(
    txn: Txn[memoryview],
    meta: Any,
    cid: bytes,
    *,
    run_id: str,
    metadata: Mapping[str, Any],
    where: str,
) -> Problem | None:
    """The problem with a LangGraph checkpoint's head, or None (``verify()``).

    Only a checkpoint of a LangGraph run (``lg:...``) whose manifest metadata holds
    :data:`HEAD_KEY` is checked: anything else costs a string compare. A head that
    fails the check is reported only when a LangGraph index entry names the
    checkpoint: any caller may record a run named ``lg:x`` with metadata ``lg`` of its
    own (``store.recorder``), which is no saver checkpoint and no problem (audit25).
    """
    if not run_id.startswith(LG_RUN_PREFIX) or HEAD_KEY not in metadata:
        return None
    try:
        check_head(metadata[HEAD_KEY], lambda: f"{where}.metadata[{HEAD_KEY!r}]")
    except CpstoreError as exc:
        if not _indexed(txn, meta, cid, run_id):
            return None
        return Problem(exc.what, exc.where or where, exc.expected, exc.got)
    return None


def _indexed(txn: Txn[memoryview], meta: Any, cid: bytes, run_id: str) -> bool:
    """Whether a LangGraph index entry names checkpoint ``cid`` (a failed head only).

    A run ``lg:<thread>`` is its thread's: its entries are looked through first; a
    hashed run name (``lg:#b2:<hex>``, or an older release's ``lg:#<hex>``) cannot be
    turned back into its thread, and a run a release with other naming rules recorded
    might not be its thread's, so failing that every entry is. An entry that fails its
    own check names nothing here (``check_index`` reports it)."""
    thread = run_id[len(LG_RUN_PREFIX) :]
    if not thread.startswith("#"):
        try:
            if _names(txn, meta, checkpoint_key(thread, sized=False), cid):
                return True
        except CpstoreError:
            pass
    return _names(txn, meta, CHECKPOINT_PREFIX, cid)


def _names(txn: Txn[memoryview], meta: Any, prefix: bytes, cid: bytes) -> bool:
    """Whether an entry under ``prefix`` names checkpoint ``cid``."""
    for key, value in scan(txn, meta, prefix):
        try:
            body = unpack(key, value)
        except CpstoreError:
            continue
        if isinstance(body, dict) and body.get("cp") == cid:
            return True
    return False
