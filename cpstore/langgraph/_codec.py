"""Names and encodings the LangGraph savers share: run ids, branch names, state parts.

A LangGraph thread is the cpstore run ``lg:<thread_id>``; its root namespace
records on branch ``main``, a subgraph namespace ``ns`` on ``ns:<ns>``, and a
checkpoint whose parent is not its branch's head (time travel, a fork) starts
the branch ``<label>@<checkpoint_id>``. A checkpoint's state has the parts
``checkpoint`` (the LangGraph checkpoint without its channel values),
``metadata``, and one ``channel/<name>`` per stored channel value, each the
saver's serde output packed as ``type`` NUL ``bytes`` (a list also has
``segment/<name>/<i>`` parts, ``pack_value``; docs/langgraph.md). Layout 2
(written since issue 12) keeps ``checkpoint`` and ``metadata`` in the manifest's
metadata instead (``HEAD_KEY``, :func:`pack_head`), so a put writes one object
fewer per head part; layout 1 checkpoints (the head as state parts) stay readable.
"""

from __future__ import annotations

import functools
import hashlib
import struct
from collections.abc import Callable, Iterable, Mapping
from importlib.metadata import PackageNotFoundError, version
from typing import Any
from uuid import UUID

import ormsgpack
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

from cpstore.errors import CpstoreError, IntegrityError, InvalidInputError
from cpstore.store.lg_head import HEAD_KEY, HEAD_LAYOUT, split_head, split_pair
from cpstore.store.lg_index import HASH_SCHEME, HASHED_RUN, thread_runs

__all__ = [
    "CHANNEL",
    "HASHED_RUN",
    "HASH_SCHEME",
    "HEAD_KEY",
    "HEAD_LAYOUT",
    "LIST_KIND",
    "PASS_THROUGH",
    "SEGMENT",
    "branch_label",
    "channel_parts",
    "fork_branch",
    "load_checkpoint",
    "load_metadata",
    "load_value",
    "loads_checked",
    "msgpack_loader",
    "msgpack_options",
    "pack_head",
    "pack_typed",
    "pack_value",
    "part_loader",
    "run_for",
    "run_id_of",
    "run_ids_of",
    "thread_runs",
    "undecodable",
    "unpack_head",
    "unpack_typed",
    "value_pair",
]

#: State part name prefix of a channel value.
CHANNEL = "channel/"
#: State part name prefix of a list channel's segments.
SEGMENT = "segment/"
#: The type tag of a list stored element by element (``pack_value``).
LIST_KIND = "cpstore.list"
#: A list segment closes once it holds at least this many bytes.
SEGMENT_BYTES = 16 * 1024
_NAME_LIMIT = 200
# HEAD_KEY (the manifest metadata key holding a layout-2 head, :func:`pack_head`) and
# HEAD_LAYOUT (2, the layout this saver writes; layout 1: the head as the state parts
# ``checkpoint`` and ``metadata``) live with the head's framing in the store room
# (cpstore/store/lg_head.py), where ``verify()`` checks it.
_HEAD_LEN = struct.Struct(">BI")
_LEN = struct.Struct("<I")
_COUNT = struct.Struct("<Q")


def _fits(name: str) -> bool:
    try:
        raw = name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return 0 < len(raw) <= _NAME_LIMIT and b"\x00" not in raw


# HASH_SCHEME (``b2:``, the tag of this release's hashed names), HASHED_RUN (``lg:#``,
# the prefix of every hashed run) and thread_runs (every run a release records a thread
# on) live with the index in the store room (cpstore/store/lg_index.py), where
# ``verify()`` checks the run each index entry names.


def _hashed(prefix: str, text: str) -> str:
    """``<prefix>b2:<hex>``: BLAKE2b-256 of the name, so no two names chosen to meet
    share a run or a branch (scheme 1, XXH3-128, let a pair of 400-byte thread ids
    share one: tests/lg_collide.py)."""
    raw = text.encode("utf-8", "surrogatepass")
    return prefix + HASH_SCHEME + hashlib.blake2b(raw, digest_size=32).hexdigest()


def run_for(thread_id: str) -> str:
    """The cpstore run id a new LangGraph thread records on (hashed when the id cannot be
    a run name). A thread whose index entries already name a run keeps that run
    (``_write.root_run``): a thread an older release hashed stays on its ``lg:#<hex>``."""
    name = "lg:" + thread_id
    # A hashed name is "lg:#...": an id starting with "#" is hashed too, or
    # thread "#<hex>" would share (and delete_thread sweep) another thread's run.
    return name if _fits(name) and not thread_id.startswith("#") else _hashed(HASHED_RUN, thread_id)


def branch_label(ns: str) -> str:
    """The branch a namespace records on: ``main`` for the root, ``ns:<ns>`` otherwise."""
    if not ns:
        return "main"
    name = "ns:" + ns
    return name if _fits(name) else _hashed("ns#", ns)


def fork_branch(ns: str, checkpoint_id: str, attempt: int = 0) -> str:
    """The branch a checkpoint starts when its parent is not its branch's head."""
    name = f"{branch_label(ns)}@{checkpoint_id}" + (f"~{attempt}" if attempt else "")
    return name if _fits(name) else _hashed("fork#", name)


#: The packed prefix (tag, NUL) of the type tags LangGraph's serdes give, by tag: a pair
#: of one of them and exact bytes needs no check (saver87: ~1 k instructions a put).
_TAG_PREFIX = {k: k.encode("utf-8") + b"\x00" for k in ("msgpack", "json", "null", "bytes")}


def pack_typed(typed: tuple[str, bytes]) -> bytes:
    """One serde ``(type, bytes)`` pair as one state part value."""
    kind, data = typed
    if type(data) is bytes and type(kind) is str:
        prefix = _TAG_PREFIX.get(kind)
        if prefix is not None:
            return prefix + data
    if not isinstance(kind, str) or "\x00" in kind:
        raise InvalidInputError("a serde type tag must be a str without NUL", got=kind)
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidInputError("serde data must be bytes", got=type(data).__name__)
    return kind.encode("utf-8") + b"\x00" + bytes(data)


def unpack_typed(part: Any, where: str) -> tuple[str, bytes]:
    """The serde ``(type, bytes)`` pair a state part holds (IntegrityError when it is
    not bytes, has no NUL or its type tag is not UTF-8: ``lg_head.split_pair``)."""
    return split_pair(part, where)


#: Exceptions a serde's decode lets through unchanged: cpstore's own, and running out
#: of memory (no statement about the stored bytes).
PASS_THROUGH: tuple[type[BaseException], ...] = (CpstoreError, MemoryError)


def undecodable(exc: BaseException, where: str) -> IntegrityError:
    """A serde's refusal of stored, hash-checked bytes, as IntegrityError naming where."""
    return IntegrityError(
        "a stored LangGraph value does not decode with the saver's serde",
        where=where,
        expected="bytes the serde decodes",
        got=f"{type(exc).__name__}: {exc}",
    )


def loads_checked(serde: Any, typed: tuple[str, bytes], where: str) -> Any:
    """``serde.loads_typed(typed)``; any refusal (an unknown type, bytes it cannot
    decode) is :class:`IntegrityError` naming ``where``, never the serde's own exception."""
    try:
        return serde.loads_typed(typed)
    except PASS_THROUGH:
        raise
    except Exception as exc:
        raise undecodable(exc, where) from exc


def _load_head_map(serde: Any, part: Any, where: str, what: str) -> dict[str, Any]:
    """The map a packed head half holds; IntegrityError ``what`` (naming ``where``)
    when it decodes to anything else, or as :func:`loads_checked` when it does not decode."""
    value = loads_checked(serde, unpack_typed(part, where), where)
    if type(value) is not dict:
        raise IntegrityError(what, where=where, expected="dict", got=type(value).__name__)
    return value


def load_checkpoint(serde: Any, part: Any, where: str) -> dict[str, Any]:
    """The LangGraph checkpoint (without channel values) a packed head half holds.

    IntegrityError when it does not decode, is not a map, or its ``channel_versions``
    is present but not a map."""
    where = f"{where}: head checkpoint"
    cp = _load_head_map(serde, part, where, "a LangGraph checkpoint head does not decode to a map")
    versions = cp.get("channel_versions")
    if versions is not None and not isinstance(versions, dict):
        raise IntegrityError(
            "a LangGraph checkpoint's channel_versions is not a map",
            where=where,
            expected="dict",
            got=type(versions).__name__,
        )
    return cp


def load_metadata(serde: Any, part: Any, where: str) -> dict[str, Any]:
    """The LangGraph metadata a packed head half holds (IntegrityError unless a map)."""
    where = f"{where}: head metadata"
    return _load_head_map(
        serde, part, where, "LangGraph checkpoint metadata does not decode to a map"
    )


def pack_head(checkpoint: bytes, metadata: bytes) -> bytes:
    """A layout-2 head: the layout byte (2), the length of ``checkpoint`` (uint32 BE),
    then the two packed serde pairs (:func:`pack_typed`) back to back."""
    return _HEAD_LEN.pack(HEAD_LAYOUT, len(checkpoint)) + checkpoint + metadata


def unpack_head(head: Any, where: str) -> tuple[bytes, bytes]:
    """The packed ``checkpoint`` and ``metadata`` serde pairs of a layout-2 head.

    IntegrityError when it is not bytes or its framing is wrong (each half must be a
    serde pair); FormatVersionError for a layout byte this release does not know
    (``lg_head.split_head``, which ``verify()`` runs too).
    """
    return split_head(head, where)


#: The prefix of a part holding a ``msgpack`` serde pair.
_MSGPACK = b"msgpack\x00"
_MSGPACK_AT = len(_MSGPACK)
_JSONPLUS_LOADS = JsonPlusSerializer.loads_typed

#: langgraph-checkpoint releases whose ``JsonPlusSerializer.loads_typed`` the fast
#: decode was proven equal to (tests/test_langgraph_reads.py): it repeats that
#: method's msgpack branch, so another release keeps calling the method itself
#: until the tests have run against it and it is listed here.
FAST_DECODE_RELEASES = ("4.3.",)


def _release() -> str:
    try:
        return version("langgraph-checkpoint")
    except PackageNotFoundError:  # installed without metadata: unknown, never fast
        return ""


FAST_DECODE = _release().startswith(FAST_DECODE_RELEASES)


def msgpack_options(serde: Any) -> tuple[Callable[..., Any], int] | None:
    """``(ext_hook, option)``: ``serde.loads_typed(("msgpack", data))`` is
    ``ormsgpack.unpackb(data, ext_hook=ext_hook, option=option)`` for the exact default
    :class:`JsonPlusSerializer` on a release in :data:`FAST_DECODE_RELEASES` (the
    conditions :func:`part_loader` states); None for any other serde. A caller makes
    that call itself: through ``functools.partial`` it costs ~130 ns more a value."""
    if (
        FAST_DECODE
        and type(serde) is JsonPlusSerializer
        and JsonPlusSerializer.loads_typed is _JSONPLUS_LOADS
        and "loads_typed" not in vars(serde)
    ):
        return serde._unpack_ext_hook, ormsgpack.OPT_NON_STR_KEYS
    return None


def msgpack_loader(serde: Any) -> Callable[[bytes], Any] | None:
    """``serde.loads_typed(("msgpack", data))`` as one C-level call, under
    :func:`msgpack_options`' conditions; None for any other serde."""
    opts = msgpack_options(serde)
    if opts is None:
        return None
    return functools.partial(ormsgpack.unpackb, ext_hook=opts[0], option=opts[1])


def part_loader(serde: Any) -> Callable[[Any, str], Any]:
    """``load(part, where)``: ``serde.loads_typed(unpack_typed(part, where))``, in one call;
    a serde's refusal is :class:`IntegrityError` (:func:`undecodable`), as in :func:`loads_checked`.

    For the exact default :class:`JsonPlusSerializer` (its class's own
    ``loads_typed``, not overridden on the class or the instance, on a
    langgraph-checkpoint release in :data:`FAST_DECODE_RELEASES`), a part of
    type ``msgpack`` goes straight to the call that ``loads_typed`` makes for
    it: ``ormsgpack.unpackb`` of the same bytes with the serializer's own ext
    hook (its allowlist) and ``OPT_NON_STR_KEYS``; tests compare the two on
    many values, LangGraph's message objects among them. Every other part,
    and every part with any other serde, goes through ``serde.loads_typed``.
    """
    loads = serde.loads_typed
    opts = msgpack_options(serde)
    if opts is not None:
        hook, option = opts
        unpackb = ormsgpack.unpackb

        def load_fast(part: Any, where: str) -> Any:
            try:
                if type(part) is bytes and part.startswith(_MSGPACK):
                    return unpackb(part[_MSGPACK_AT:], ext_hook=hook, option=option)
                return loads(unpack_typed(part, where))
            except PASS_THROUGH:
                raise
            except Exception as exc:
                raise undecodable(exc, where) from exc

        return load_fast

    def load(part: Any, where: str) -> Any:
        try:
            return loads(unpack_typed(part, where))
        except PASS_THROUGH:
            raise
        except Exception as exc:
            raise undecodable(exc, where) from exc

    return load


def segment_name(channel: str, i: int) -> str:
    """The state part holding segment ``i`` of a list channel's elements."""
    return f"{SEGMENT}{channel}/{i}"


def pack_value(
    serde: Any, channel: str, value: Any, previous: Mapping[str, bytes] | None = None
) -> dict[str, bytes]:
    """A channel value as state parts: ``channel/<name>``, and its segments for a list.

    Most values are one part, the serde pair. When the serde gives msgpack
    bytes of an array (a list, e.g. a message history, with the default
    JsonPlusSerializer), those very bytes are cut at element boundaries into
    segments of at least ``SEGMENT_BYTES`` (parts ``segment/<name>/<i>``), and
    ``channel/<name>`` holds ``cpstore.list`` NUL, the type tag, the array
    header and the segment count and total length. Appending to the list
    leaves every closed segment unchanged, so a growing history stores each
    message once, not once per step. Reading joins the bytes back: the serde
    decodes exactly what it encoded, whatever the values are, so where the cuts
    fall decides only how much is shared, never what is read.

    ``previous`` (this channel's parts at the last checkpoint) lets the closed
    segments it had be found again with a byte compare instead of a parse.
    """
    typed = serde.dumps_typed(value)
    kind, data = typed
    if type(data) is not bytes:
        data = bytes(data)
    elif len(data) <= SEGMENT_BYTES:  # the common case: one part, the pair as given
        return {CHANNEL + channel: pack_typed(typed)}
    header = _array_header(data) if kind == "msgpack" and len(data) > SEGMENT_BYTES else None
    if header is None:
        return {CHANNEL + channel: pack_typed((kind, data))}
    start = at = header
    parts: dict[str, bytes] = {}
    for seg in _closed_segments(previous, channel):
        if not data.startswith(seg, at):
            break
        parts[segment_name(channel, len(parts))] = seg
        at += len(seg)
    ends = _element_ends(data, at)
    if ends is None:
        ends = [len(data)]  # not elements we can walk: one open segment, still exact
    for end in ends:
        if end - at >= SEGMENT_BYTES or end == len(data):
            parts[segment_name(channel, len(parts))] = data[at:end]
            at = end
    tag = kind.encode("utf-8")
    head = (
        bytes([len(tag)])
        + tag
        + bytes([start])
        + data[:start]
        + _COUNT.pack(len(parts))
        + _COUNT.pack(len(data))
    )
    return {CHANNEL + channel: LIST_KIND.encode() + b"\x00" + head, **parts}


def _array_header(data: bytes) -> int | None:
    """The length of the msgpack array header ``data`` starts with, or None."""
    first = data[0]
    if 0x90 <= first <= 0x9F:
        return 1
    return {0xDC: 3, 0xDD: 5}.get(first)


def _closed_segments(previous: Mapping[str, bytes] | None, channel: str) -> list[bytes]:
    """The segments of ``previous`` but its last (the one still filling)."""
    if not previous:
        return []
    out: list[bytes] = []
    while (seg := previous.get(segment_name(channel, len(out)))) is not None:
        out.append(seg)
    return out[:-1]


def _element_ends(data: bytes, at: int) -> list[int] | None:
    """The end offset of each msgpack value from ``at`` to the end; None if they do not parse."""
    ends = []
    try:
        while at < len(data):
            at = _skip(data, at)
            ends.append(at)
    except (IndexError, ValueError, RecursionError):
        return None
    return ends if at == len(data) else None


_FIXED = {
    0xC0: 1,
    0xC2: 1,
    0xC3: 1,
    0xCA: 5,
    0xCB: 9,
    0xCC: 2,
    0xCD: 3,
    0xCE: 5,
    0xCF: 9,
    0xD0: 2,
    0xD1: 3,
    0xD2: 5,
    0xD3: 9,
    0xD4: 3,
    0xD5: 4,
    0xD6: 6,
    0xD7: 10,
    0xD8: 18,
}
#: code -> (bytes of the length field, bytes before the payload besides it)
_SIZED = {
    0xC4: (1, 0),
    0xC5: (2, 0),
    0xC6: (4, 0),
    0xC7: (1, 1),
    0xC8: (2, 1),
    0xC9: (4, 1),
    0xD9: (1, 0),
    0xDA: (2, 0),
    0xDB: (4, 0),
}


def _skip(data: bytes, at: int) -> int:
    """The offset after the msgpack value at ``at`` (ValueError on a bad byte)."""
    b = data[at]
    if b <= 0x7F or b >= 0xE0:
        return at + 1
    if 0xA0 <= b <= 0xBF:
        return at + 1 + (b & 0x1F)
    fixed = _FIXED.get(b)
    if fixed is not None:
        return at + fixed
    sized = _SIZED.get(b)
    if sized is not None:
        width, extra = sized
        size = int.from_bytes(data[at + 1 : at + 1 + width], "big")
        end = at + 1 + width + extra + size
        if end > len(data):
            raise ValueError("value runs past the end")
        return end
    if 0x80 <= b <= 0x9F:
        items, at = (b & 0x0F) * (2 if b <= 0x8F else 1), at + 1
    elif b in (0xDC, 0xDE):
        items = int.from_bytes(data[at + 1 : at + 3], "big") * (2 if b == 0xDE else 1)
        at += 3
    elif b in (0xDD, 0xDF):
        items = int.from_bytes(data[at + 1 : at + 5], "big") * (2 if b == 0xDF else 1)
        at += 5
    else:
        raise ValueError(f"not a msgpack byte: {b:#x}")
    for _ in range(items):
        at = _skip(data, at)
    return at


def channel_parts(parts: Mapping[str, Any], channel: str, where: str) -> dict[str, bytes]:
    """The parts of one channel's value out of a checkpoint's parts (head and segments)."""
    head = parts[CHANNEL + channel]
    out = {CHANNEL + channel: head}
    kind, data = unpack_typed(head, where)
    if kind == LIST_KIND:
        for i in range(_list_head(data, where)[2]):
            name = segment_name(channel, i)
            if name not in parts:
                raise IntegrityError("a list segment is missing", where=f"{where}: {name}")
            out[name] = parts[name]
    return out


def _list_head(data: bytes, where: str) -> tuple[str, bytes, int, int]:
    """``(type tag, array header, segment count, total length)`` of a list head."""
    try:
        n = data[0]
        tag = data[1 : 1 + n].decode("utf-8")
        m = data[1 + n]
        prefix = data[2 + n : 2 + n + m]
        rest = data[2 + n + m :]
        if len(prefix) != m or len(rest) != 2 * _COUNT.size:
            raise ValueError("wrong length")
    except (IndexError, ValueError, UnicodeDecodeError):
        raise IntegrityError("a stored list head is malformed", where=where) from None
    return tag, prefix, _COUNT.unpack_from(rest, 0)[0], _COUNT.unpack_from(rest, _COUNT.size)[0]


def value_pair(parts: Mapping[str, Any], channel: str, where: str) -> tuple[str, bytes]:
    """The serde pair of ``channel`` the parts hold, a list's segments joined back
    (IntegrityError when the framing is wrong)."""
    kind, data = unpack_typed(parts[CHANNEL + channel], where)
    if kind != LIST_KIND:
        return kind, data
    tag, prefix, segments, total = _list_head(data, where)
    pieces = [prefix]
    for i in range(segments):
        seg = parts.get(segment_name(channel, i))
        if not isinstance(seg, (bytes, bytearray, memoryview)):
            raise IntegrityError(
                "a list segment is missing", where=f"{where}: {segment_name(channel, i)}"
            )
        pieces.append(bytes(seg))
    whole = b"".join(pieces)
    if len(whole) != total:
        raise IntegrityError(
            "a stored list value is malformed", where=where, expected=total, got=len(whole)
        )
    return tag, whole


def load_value(serde: Any, parts: Mapping[str, Any], channel: str, where: str) -> Any:
    """The value of ``channel`` the parts hold (IntegrityError when the framing is wrong
    or the serde refuses the bytes)."""
    return loads_checked(serde, value_pair(parts, channel, where), where)


def run_id_of(value: Any) -> str | None:
    """The run id an index entry keeps for ``metadata["run_id"]`` (``delete_for_runs``
    matches it): a str as it is (LangGraph's ``get_checkpoint_metadata`` took NUL out),
    a ``uuid.UUID`` as its canonical str (the form LangGraph itself writes, ``str(run_id)``;
    kept as None before lgfix72, so ``delete_for_runs`` never found it), else None: an
    int, float or bool (which ``get_checkpoint_metadata`` copies from the config's
    metadata) is no str run id, as InMemorySaver's metadata filter ``{"run_id": "5"}``
    does not match ``5``."""
    if isinstance(value, str):
        return value
    if isinstance(value, UUID):
        return str(value)
    return None


def refuse_one_id(ids: object, message: str, expected: str) -> None:
    """InvalidInputError for ``ids`` that is one str or bytes (a str is a sequence of
    one-character ids) or not iterable, where a call takes a sequence of ids."""
    if isinstance(ids, (str, bytes, bytearray, memoryview)) or not isinstance(ids, Iterable):
        raise InvalidInputError(
            message, expected=expected, got=f"{type(ids).__name__} {ids!r}"[:120]
        )


def run_ids_of(run_ids: Any) -> set[str]:
    """The run ids ``delete_for_runs(run_ids)`` matches, each as :func:`run_id_of` keeps a
    metadata run id (NUL taken out, as ``get_checkpoint_metadata`` did when it was put).

    ``InvalidInputError`` naming the entry for anything but a str or ``uuid.UUID`` (None,
    an int, bytes: before lgfix72 each went through ``str()`` and matched nothing, or
    "None" matched a run of that name), and for a ``run_ids`` that is one str or bytes
    (a str is a sequence of one-character ids) or not iterable: nothing is deleted."""
    refuse_one_id(run_ids, "delete_for_runs takes a sequence of run ids", "a list of str run ids")
    wanted: set[str] = set()
    for i, run_id in enumerate(run_ids):
        kept = run_id_of(run_id)
        if kept is None:
            raise InvalidInputError(
                "a run id to delete is a str (or uuid.UUID)",
                where=f"run_ids[{i}]",
                expected="str",
                got=f"{type(run_id).__name__} {run_id!r}"[:120],
            )
        wanted.add(kept.replace("\x00", ""))
    return wanted
