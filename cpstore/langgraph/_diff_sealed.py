"""What ``diff_threads`` does with values an encrypting serde sealed (lgsub80).

LangGraph's ``EncryptedSerializer`` stores each value as ``(<type>+<cipher>, bytes)``
and its ciphers draw a random nonce (AES-EAX in ``from_pycryptodome_aes``): equal
values are different bytes. Equal bytes are equal values whatever the serde, so a
digest match is kept as it is; a sealed value or write whose bytes differ is opened
with the diff's serde on both sides: given an ``EncryptedSerializer``, its cipher
decrypts it and the inner serde's bytes are compared, as plain values are (review80: a
decode that cannot rebuild a class made a dataclass equal to the dict of its fields);
any other serde decodes it, and it is compared as the plain :class:`JsonPlusSerializer`
writes it (:func:`plain_value`, :func:`canonical_write`).
One the serde cannot decode (no serde given, another key) is *undecidable*, never the
same: equal values may be behind the two ciphertexts, or not. A checkpoint whose
metadata is sealed and does not decode stops the diff as undecidable
(:class:`Undecidable`): its step and its DeltaChannels are unknown.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from cpstore.errors import IntegrityError
from cpstore.langgraph._codec import (
    CHANNEL,
    LIST_KIND,
    PASS_THROUGH,
    SEGMENT,
    load_metadata,
    loads_checked,
    unpack_typed,
    value_pair,
)
from cpstore.langgraph._read import StoredWrite
from cpstore.store.reader import CheckpointView

__all__ = [
    "DECIDED",
    "SEALED",
    "UNSURE",
    "Undecidable",
    "canonical_write",
    "metadata_of",
    "plain_value",
    "sealed",
    "sealed_channel",
    "starting_value",
    "writes_digest",
]

#: How the compared form of a sealed value is written: deterministic for equal values.
_PLAIN = JsonPlusSerializer()

#: LangGraph's channel for the interrupts a task raised (``langgraph.types.interrupt``).
INTERRUPT = "__interrupt__"


class Undecidable(Exception):  # noqa: N818 - control flow inside the diff, never raised out
    """The diff cannot tell whether the chains are equal; ``args[0]`` says why."""


def sealed(kind: str) -> bool:
    """Whether a serde type tag is a cipher's: ``EncryptedSerializer`` writes
    ``<type>+<cipher name>``, both named, and no plain LangGraph type holds ``+``
    (review80: a bare ``+``, ``x+`` or ``+y`` is damage, IntegrityError as elsewhere)."""
    kind_, plus, cipher = kind.partition("+")
    return bool(plus and kind_ and cipher)


#: Why a difference in sealed bytes is not told (the summary's words).
SEALED = (
    "sealed by an encrypting serde that the diff's serde does not decode (pass the "
    "saver's serde: diff_threads(..., serde=...))"
)


def _hint(kind: str) -> str:
    return (
        f"stored sealed ({kind!r}) and the diff's serde does not decode it: pass the "
        "saver's serde (diff_threads(..., serde=...)) to compare the values"
    )


def metadata_of(serde: Any, part: Any, where: str) -> dict[str, Any]:
    """``load_metadata``; :class:`Undecidable` instead of its IntegrityError when the
    metadata is sealed (the wrong serde or key, not damage: the bytes are hash-checked)."""
    try:
        return load_metadata(serde, part, where)
    except IntegrityError:
        kind = unpack_typed(part, where)[0]
        if not sealed(kind):
            raise
        raise Undecidable(f"the metadata of {where} is {_hint(kind)}") from None


def sealed_channel(view: CheckpointView, channel: str) -> str | None:
    """The sealed type tag of a channel's stored value, or None (plain, a list head:
    only a plain msgpack value is cut into segments, or not stored)."""
    if CHANNEL + channel not in view.manifest.raw["state"]["parts"]:
        return None
    kind = unpack_typed(view.state_part(CHANNEL + channel), channel)[0]
    return kind if sealed(kind) else None


def _inner(serde: Any) -> Any:
    """The serde an ``EncryptedSerializer``-shaped ``serde`` seals the output of (its
    ``serde``, beside a ``cipher`` that decrypts), or None."""
    cipher, inner = getattr(serde, "cipher", None), getattr(serde, "serde", None)
    if callable(getattr(cipher, "decrypt", None)) and callable(getattr(inner, "loads_typed", None)):
        return inner
    return None


def _opened(serde: Any, inner: Any, typed: tuple[str, bytes]) -> tuple[str, bytes] | None:
    """The inner serde's pair under a sealed one (``serde.cipher`` decrypts it), or None
    when it does not decrypt or the inner serde does not load it (a wrong key that
    decrypts without raising gives bytes no serde loads, as a rule)."""
    kind, ciphername = typed[0].split("+", 1)
    try:
        pair = (kind, bytes(serde.cipher.decrypt(ciphername, bytes(typed[1]))))
        inner.loads_typed(pair)
    except PASS_THROUGH:
        raise
    except Exception:  # anything the cipher or the serde raises: not decided
        return None
    return pair


def _digest(typed: tuple[str, bytes]) -> bytes:
    return hashlib.blake2b(typed[0].encode() + b"\x00" + bytes(typed[1]), digest_size=32).digest()


#: The values a reducer channel (``BinaryOperatorAggregate``) of a builtin type holds
#: before any write (``typ()``), as the plain JsonPlusSerializer writes them: LangGraph
#: loads such a channel never written as that value, a ``LastValue`` never written as
#: missing, and the checkpoint does not say which the channel is (lgleft86).
_START_VALUES: tuple[Any, ...] = ([], {}, (), set(), frozenset(), "", b"", 0, 0.0, False)
_STARTS = frozenset(_digest(_PLAIN.dumps_typed(v)) for v in _START_VALUES)


def starting_value(serde: Any, view: CheckpointView, channel: str, where: str) -> bool:
    """Whether the channel holds the value a reducer channel of a builtin type starts
    as (``[]``, ``{}``, ``""``, ``0``...): a plain pair by its bytes (nothing decoded),
    a sealed one as :func:`plain_value` opens it."""
    if CHANNEL + channel not in view.manifest.raw["state"]["parts"]:
        return False  # segments without their head: compared by their digests
    if sealed_channel(view, channel) is not None:
        return plain_value(serde, view, channel, where) in _STARTS
    kind, data = unpack_typed(view.state_part(CHANNEL + channel), where)
    return kind != LIST_KIND and _digest((kind, data)) in _STARTS


def plain_value(serde: Any, view: CheckpointView, channel: str, where: str) -> bytes | None:
    """A digest of the channel's value as compared across a cipher, or None when the
    serde does not open it. Given an ``EncryptedSerializer`` (review80), the pair its
    inner serde wrote, a sealed one decrypted: bytes, as a plain value is compared
    (a decode loses what a value is when the serde may not rebuild its class: a
    dataclass and the dict of its fields were equal). Else the value decoded with
    ``serde`` and written by the plain JsonPlusSerializer. A channel the view does not
    hold is the digest of nothing."""
    names: Mapping[str, Any] = view.manifest.raw["state"]["parts"]
    if CHANNEL + channel not in names:
        return b""
    parts = {CHANNEL + channel: view.state_part(CHANNEL + channel)}
    if unpack_typed(parts[CHANNEL + channel], where)[0] == LIST_KIND:
        prefix = f"{SEGMENT}{channel}/"
        at = len(prefix)
        parts.update(
            {n: view.state_part(n) for n in names if n[:at] == prefix and n[at:].isdigit()}
        )
    pair = value_pair(parts, channel, where)
    inner = _inner(serde)
    if inner is not None:
        if sealed(pair[0]):
            opened = _opened(serde, inner, pair)
            return None if opened is None else _digest(opened)
        return _digest(pair)
    try:
        value = loads_checked(serde, pair, where)
    except IntegrityError as exc:
        if exc.__cause__ is None:
            raise  # the framing is wrong (damage), not the serde's refusal (``undecodable``)
        return None
    try:
        plain = _PLAIN.dumps_typed(value)
    except PASS_THROUGH:
        raise
    except Exception:  # a value the plain serde cannot write
        return None
    return _digest(plain)


def _without_ids(value: Any) -> Any:
    """An interrupt write's value with each interrupt's ``id`` blanked (LangGraph derives
    it from the task id, itself from the checkpoint id: equal interrupts on two threads
    carry other ids) and the interrupts sorted by the bytes the plain JsonPlusSerializer
    writes for each, or None when it holds no list of dataclasses. Sorted (lgdiff89): a
    subgraph whose parallel nodes each interrupt lists them in the order its tasks raised
    (thread timing), and a resume reads them by id, never by place; in order, two
    threads interrupted alike were the same on one run and diverged on the next."""
    if not isinstance(value, (list, tuple)) or not all(
        dataclasses.is_dataclass(i) and not isinstance(i, type) and hasattr(i, "id") for i in value
    ):
        return None
    blanked = [dataclasses.replace(i, id="") for i in value]
    return sorted(blanked, key=_PLAIN.dumps_typed)


def canonical_write(serde: Any, channel: str, typed: tuple[str, bytes]) -> tuple[str, bytes] | None:
    """The serde pair a pending write is compared by. A plain write as stored; an
    ``__interrupt__`` one with its interrupts' ids blanked (re-dumped by ``serde``, or
    the plain JsonPlusSerializer when ``serde`` seals; as stored when the serde cannot
    load it or it holds no interrupts); a sealed one
    decoded with ``serde`` and written by the plain JsonPlusSerializer (ids blanked
    too). None: a sealed write the serde does not decode (compared as stored, and a
    difference is undecidable). Given an ``EncryptedSerializer``, a sealed write is
    first opened to its inner serde's pair, compared as a plain write is (review80)."""
    inner = _inner(serde)
    if inner is not None:
        if sealed(typed[0]):
            opened = _opened(serde, inner, typed)
            if opened is None:
                return None
            typed = opened
        serde = inner
    kind = typed[0]
    is_sealed = sealed(kind)
    if not is_sealed and channel != INTERRUPT:
        return typed
    try:
        value = serde.loads_typed(typed)
        if channel == INTERRUPT:
            blanked = _without_ids(value)
            if blanked is None and not is_sealed:
                return typed
            value = value if blanked is None else blanked
        out: tuple[str, bytes] = (_PLAIN if is_sealed else serde).dumps_typed(value)
        if sealed(out[0]):  # a plain interrupt, an encrypting serde: its nonce is new
            out = _PLAIN.dumps_typed(value)
    except PASS_THROUGH:
        raise
    except Exception:  # anything the serde raises: compared as stored
        return None if is_sealed else typed
    return out


#: The last byte of a writes digest (:func:`writes_digest`): every write compared as
#: canonical, or some sealed write the serde does not decode (a difference undecidable).
DECIDED, UNSURE = b"=", b"?"


def writes_digest(writes: list[StoredWrite], *, paths: bool, serde: Any) -> dict[str, bytes]:
    """Per channel, a digest of the writes to it in their order (``writes_sort_key``):
    each one's serde pair as :func:`canonical_write`
    gives it (interrupt ids blanked, a sealed write decoded), and its task path when
    ``paths``. Task ids are left out (LangGraph derives them from the checkpoint id,
    which differs between threads). The digest ends in ``UNSURE`` when a sealed write
    to the channel did not decode (then compared as stored)."""
    hashes: dict[str, Any] = {}
    unsure: set[str] = set()
    for w in writes:
        h = hashes.get(w.channel)
        if h is None:
            h = hashes[w.channel] = hashlib.blake2b(digest_size=32)
        typed = (w.typed[0], bytes(w.typed[1]))
        plain = canonical_write(serde, w.channel, typed)
        if plain is None:
            unsure.add(w.channel)
        kind, data = plain or typed
        for text in (w.task_path, kind) if paths else (kind,):
            raw = text.encode("utf-8", "surrogatepass")
            h.update(len(raw).to_bytes(8, "big") + raw)
        data = bytes(data)
        h.update(len(data).to_bytes(8, "big") + data)
    return {c: h.digest() + (UNSURE if c in unsure else DECIDED) for c, h in hashes.items()}
