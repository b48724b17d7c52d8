"""audit45: a checkpoint of an AppendLog part interrupted in its stash leaves the log
appendable while the caller keeps the exception.

The stash framed each settled chunk from a slice of the log's buffer
(``frame_chunk(body[a:b])``). An exception raised while a chunk was framed (a SIGINT
landing during its zstd compression, a MemoryError) kept that slice alive in the
traceback's frames, and the slice kept the log's bytearray exported: while the caller
held the exception (a logger's record, a Future's result, the REPL's ``sys.last_exc``),
every ``log.append`` raised a raw ``BufferError: Existing exports of data: object cannot
be re-sized`` — the runtime could not record its next step. The stash now frames a copy
(``encode_frame`` copied the slice to bytes anyway: same cost); a height refusal, which
raises with no slice alive, is pinned beside it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tall_tree import force_ends

import cpstore
from cpstore.errors import InvalidInputError
from cpstore.native.append_log import AppendLog
from cpstore.store import chunk_tree, codec

_ELEMENTS = [os.urandom(700) for _ in range(90)]  # each ends a chunk (RUN_MIN 512)


def _check_appendable_while_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fault: str
) -> None:
    log = AppendLog(_ELEMENTS[:30])
    with cpstore.open(tmp_path / "s") as store:
        rec = store.recorder("r")
        first = rec.checkpoint(0, {"log": log})
        log.extend(_ELEMENTS[30:60])
        kept: list[BaseException] = []
        with monkeypatch.context() as m:
            if fault == "height":
                force_ends(m, 10_000)
            else:
                real = codec.encode_frame  # what frame_chunk calls, by chunk_tree's name
                exc_type = KeyboardInterrupt if fault == "interrupt" else MemoryError

                def framing(content: bytes | memoryview, **kwargs: bool) -> bytes:
                    real(content, **kwargs)
                    raise exc_type  # as a SIGINT arriving while zstd compressed this chunk

                m.setattr(chunk_tree, "encode_frame", framing)
            try:
                rec.checkpoint(1, {"log": log})
            except (KeyboardInterrupt, MemoryError, InvalidInputError) as exc:
                kept.append(exc)  # held, as a logger or a Future holds it
        assert len(kept) == 1
        assert store.ref("r") == first
        log.extend(_ELEMENTS[60:])  # BufferError before, for a slice the traceback kept
        cid = rec.checkpoint(1, {"log": log})
        with store.read(cid) as cp:
            assert cp.state_part("log") == _ELEMENTS
        assert store.verify_checkpoint(cid) == ()
        assert store.verify().ok
        rec.close()


@pytest.mark.parametrize("fault", ["interrupt", "memory"])
def test_an_append_log_grows_while_its_interrupted_stash_error_is_kept(
    fault: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _check_appendable_while_kept(tmp_path, monkeypatch, fault)


def test_an_append_log_grows_while_a_height_refusal_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _check_appendable_while_kept(tmp_path, monkeypatch, "height")
