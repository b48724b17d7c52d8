"""Writing a run as a document or a packed run file, streaming its tokens.

:func:`write_document` writes the same bytes as
:func:`cpstore.run.document.dump_document` for JSON and msgpack, but builds
the token list a chunk at a time, so converting a 10 M-token run never holds
10 M token dicts; ``cprun`` writes the packed sections as they are
(:mod:`cpstore.run.cprun`).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, BinaryIO

import msgpack

from cpstore.errors import InvalidInputError
from cpstore.native.canonical import array_header
from cpstore.run.cprun import write_cprun
from cpstore.run.document import document_dict
from cpstore.run.faithful import check_document, token_chunks
from cpstore.run.model import PackedTokens, Run

__all__ = ["ENCODINGS", "write_document"]

#: What :func:`write_document` writes.
ENCODINGS = ("json", "msgpack", "cprun")
_PLACEHOLDER = "\x00cpstore:tokens\x00"


def _body(run: Run) -> dict[str, Any]:
    return document_dict(dataclasses.replace(run, tokens=PackedTokens(b"", values=[])))


def _write_json(run: Run, out: BinaryIO) -> int:
    body = _body(run)
    body["tokens"] = _PLACEHOLDER
    try:
        text = json.dumps(body, sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(
            "run is not representable in JSON; use encoding='msgpack'", got=str(exc)
        ) from None
    marker = json.dumps(_PLACEHOLDER)
    head, found, tail = text.partition(marker)
    if not found or marker in tail:  # the placeholder text also appears in a value
        data = json.dumps(
            {**body, "tokens": [t for c in token_chunks(run.tokens, json=True) for t in c]},
            sort_keys=True,
            allow_nan=False,
        ).encode()
        out.write(data)
        return len(data)
    total = out.write(head.encode() + b"[") or 0
    first = True
    for chunk in token_chunks(run.tokens, json=True):
        try:
            part = json.dumps(chunk, sort_keys=True, allow_nan=False)[1:-1]
        except (TypeError, ValueError) as exc:
            raise InvalidInputError(
                "run is not representable in JSON; use encoding='msgpack'", got=str(exc)
            ) from None
        data = (part if first else ", " + part).encode()
        total += out.write(data) or 0
        first = False
    total += out.write(b"]" + tail.encode()) or 0
    return total


def _write_msgpack(run: Run, out: BinaryIO) -> int:
    try:
        return _write_msgpack_body(run, out)
    except OverflowError as exc:
        raise _not_msgpack(exc) from None


def _not_msgpack(exc: OverflowError) -> InvalidInputError:
    """msgpack has no integer outside [-2**63, 2**64): say so, as JSON's limits are said."""
    return InvalidInputError(
        "run is not representable in msgpack (an integer outside [-2**63, 2**64)); "
        "use encoding='json' or 'cprun'",
        got=str(exc),
    )


def _write_msgpack_body(run: Run, out: BinaryIO) -> int:
    body = _body(run)
    packer = msgpack.Packer(use_bin_type=True)
    total = out.write(packer.pack_map_header(len(body))) or 0
    for key, value in body.items():
        total += out.write(packer.pack(key)) or 0
        if key != "tokens":
            total += out.write(packer.pack(value)) or 0
            continue
        total += out.write(array_header(len(run.tokens))) or 0
        for chunk in token_chunks(run.tokens, json=False):
            total += out.write(b"".join(packer.pack(t) for t in chunk)) or 0
    return total


def write_document(run: Run, out: BinaryIO, *, encoding: str) -> int:
    """Write ``run`` to a binary stream as ``json``, ``msgpack`` or ``cprun``; returns bytes."""
    if not isinstance(run, Run):
        raise InvalidInputError("run must be a Run", got=type(run).__name__)
    if encoding in ("json", "msgpack"):
        # Before a byte is written; a value of a type other than the builtins is written
        # as its canonical value (review79).
        run = check_document(run, json=encoding == "json")
    if encoding == "json":
        return _write_json(run, out)
    if encoding == "msgpack":
        return _write_msgpack(run, out)
    if encoding == "cprun":
        return write_cprun(run, out)
    raise InvalidInputError("unknown document encoding", expected=list(ENCODINGS), got=encoding)
