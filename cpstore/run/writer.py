"""Writing a run as a document or a packed run file, streaming its tokens.

:func:`write_document` writes the same bytes as
:func:`cpstore.run.document.dump_document` for JSON and msgpack, but builds
the token list a chunk at a time, so converting a 10 M-token run never holds
10 M token dicts; ``cprun`` writes the packed sections as they are
(:mod:`cpstore.run.cprun`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import stat
from pathlib import Path
from typing import Any, BinaryIO

import msgpack

from cpstore.errors import InvalidInputError, NotFoundError
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


def _write(run: Run, out: BinaryIO, encoding: str) -> int:
    if encoding == "json":
        return _write_json(run, out)
    if encoding == "msgpack":
        return _write_msgpack(run, out)
    return write_cprun(run, out)


def _write_stream(run: Run, out: BinaryIO, encoding: str) -> int:
    """Write to the caller's stream; a failure takes a seekable stream back to where the
    document began (runleft86: the head and the chunks before the failure were left)."""
    try:
        start: int | None = out.tell() if out.seekable() else None
    except (AttributeError, OSError, ValueError):
        start = None
    try:
        return _write(run, out, encoding)
    except BaseException:
        if start is not None:
            with contextlib.suppress(Exception):
                out.seek(start)
                out.truncate()
        raise


def _temp_beside(target: Path) -> tuple[int, str]:
    """A new file in ``target``'s folder (the rename stays on one filesystem), created as
    ``open(..., "wb")`` creates one (0o666 less the umask), never an existing one."""
    for _ in range(100):
        name = f".{target.name[:200]}.{secrets.token_hex(6)}.tmp"
        path = os.path.join(target.parent, name)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
            return os.open(path, flags, 0o666), path
        except FileExistsError:
            continue
        except FileNotFoundError:
            raise NotFoundError("no such folder to write into", where=str(target.parent)) from None
    raise InvalidInputError("cannot make a temporary file", where=str(target.parent))


def _write_file(run: Run, path: Path, encoding: str) -> int:
    """Write to a temporary file beside ``path``, renamed onto it only when complete and
    synced: a failure (a value changed meanwhile, a full disk, an interrupt) removes it and
    leaves ``path`` as it was, never a partial file claiming to be a run (runleft86)."""
    if not str(path):
        raise InvalidInputError("an empty path", where="out", expected="a file")
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        info: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        info = None
    if info is not None and not stat.S_ISREG(info.st_mode):
        raise InvalidInputError(
            "the output exists and is not a regular file", where=str(path), expected="a file"
        )
    fd, tmp = _temp_beside(target)
    try:
        with os.fdopen(fd, "wb") as fh:
            if info is not None and hasattr(os, "fchmod"):  # replaced: keep its permissions
                os.fchmod(fh.fileno(), stat.S_IMODE(info.st_mode))
            total = _write(run, fh, encoding)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    with contextlib.suppress(OSError):  # the rename itself, where the OS allows it
        folder = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)
    return total


def write_document(run: Run, out: BinaryIO | str | os.PathLike[str], *, encoding: str) -> int:
    """Write ``run`` as ``json``, ``msgpack`` or ``cprun``; returns the bytes written.

    ``out`` is a binary stream or a path. A path is written through a temporary file in
    its folder, renamed onto it only once complete: a failed write leaves no file and
    no temporary file, and an existing file as it was. On a stream, a failure after
    the first byte takes a seekable stream back to where the document began (truncated
    there); an unseekable one keeps what was written: discard it. Tokens are written a
    chunk at a time either way."""
    if not isinstance(run, Run):
        raise InvalidInputError("run must be a Run", got=type(run).__name__)
    if encoding not in ENCODINGS:
        raise InvalidInputError("unknown document encoding", expected=list(ENCODINGS), got=encoding)
    if encoding in ("json", "msgpack"):
        # Before a byte is written; a value of a type other than the builtins is written
        # as its canonical value (review79).
        run = check_document(run, json=encoding == "json")
    if isinstance(out, (str, os.PathLike)):
        return _write_file(run, Path(out), encoding)
    return _write_stream(run, out, encoding)
