"""The whole-state read path shared by the reader, ``history_states`` and the LangGraph saver.

A whole-state read of a parts state (not chunked) with verification on does,
per part, one heap get (the record's location hint, content.py) or the
index's get and kind-and-key compare, one XXH3-128 check of the bytes against
the part's digest, and one decode. This module does it in one loop with
nothing but those steps, and returns None at the first thing that is not the
common case (a part missing, failing its hash, not exactly one msgpack value,
a damaged location): the caller then takes the part-by-part path, which
raises naming the part. Nothing here is cached across calls but the
:class:`~cpstore.store.content.Content` table handles (stateless, never
handed out).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgpack

from cpstore.errors import IntegrityError
from cpstore.native.canonical import _ext_hook
from cpstore.store.backend import Txn
from cpstore.store.content import Content, objects_of, records_of

__all__ = ["contents", "read_parts"]

_unpackb = msgpack.unpackb
#: What a decode of damaged bytes may raise (CanonicalEncodingError is a ValueError).
_DECODE_ERRORS = (TypeError, ValueError, IndexError, msgpack.UnpackException, RecursionError)

#: id(dbs) -> (dbs, its heap handle, objects, records). The dbs dict is kept so
#: its id cannot be reused while cached; an entry is used only while the dict
#: still holds the heap handle it was built with (a read-only handle adopts the
#: heap tables in place).
_CONTENTS: dict[int, tuple[Mapping[str, Any], Any, Content, Content]] = {}
_MAX_CACHED = 64


def contents(dbs: Mapping[str, Any]) -> tuple[Content, Content]:
    """(objects, records) :class:`Content` of the tables ``dbs``, built once per table set."""
    hit = _CONTENTS.get(id(dbs))
    if hit is not None and hit[0] is dbs and hit[1] is dbs.get("heap"):
        return hit[2], hit[3]
    objects, records = objects_of(dbs), records_of(dbs)
    if len(_CONTENTS) >= _MAX_CACHED:
        _CONTENTS.clear()
    _CONTENTS[id(dbs)] = (dbs, dbs.get("heap"), objects, records)
    return objects, records


def read_parts(
    txn: Txn[memoryview], objects: Content, parts: dict[str, bytes], hints: bytes
) -> dict[str, Any] | None:
    """Every part of ``parts`` (name -> digest) hash-checked and decoded, or None.

    ``hints``: the record's hint block (content.py; b"" for none), each hint
    tried first and kept only once its bytes hash to the part's digest. None
    when any part is missing, fails its hash, does not decode as one msgpack
    value, or sits at a damaged location: the caller's part-by-part path names it.
    """
    part = objects.part
    if len(hints) != 4 * len(parts):
        hints = b""
    out: dict[str, Any] = {}
    try:
        i = 0
        for name, key in parts.items():
            view = part(txn, key, hints, i)  # hash-checked, hint first
            if view is None:
                return None
            # Only ext_hook (big ints): each keyword costs ~0.05 us per part.
            # Maps with int keys raise ValueError and take the slow path.
            out[name] = _unpackb(view, ext_hook=_ext_hook)
            i += 1
    except _DECODE_ERRORS:
        return None
    except IntegrityError:
        return None  # a damaged location: the part-by-part path names it
    return out
