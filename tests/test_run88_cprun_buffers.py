"""A ``.cprun`` whose buffers change while it is written is refused, never written damaged.

The packed run file's header holds each section's digest, computed before the sections
are written as zero-copy views of the caller's buffers (a bytearray of records, a values
blob, an offsets array). A buffer changed between the digest and the write (by another
thread, or from the output stream's own ``write``) gave a file whose header digests are
of the bytes before and whose sections are the bytes after: ``write_document`` returned,
and the file was refused on load as damaged ("section digest mismatch"). The writer now
hashes the very bytes it writes and refuses to finish (``IntegrityError`` naming the
section): to a path nothing is left, a seekable stream is taken back.
"""

from __future__ import annotations

import io
import os
import threading
from array import array
from pathlib import Path
from typing import Any

import pytest

from cpstore.errors import IntegrityError
from cpstore.native.canonical import encode_value
from cpstore.run import cprun
from cpstore.run.document import dump_document, load_document
from cpstore.run.model import PackedTokens, Run, Token
from cpstore.run.values import EncodedValues
from cpstore.run.writer import write_document


def _run(n: int = 8) -> tuple[Run, bytearray, bytearray, array[int]]:
    """A run whose records, values blob and offsets are caller-owned mutable buffers."""
    packed = PackedTokens.from_tokens([Token(i, "rng", 1000 + i) for i in range(n)])
    records = bytearray(packed.records)
    parts = [encode_value(1000 + i) for i in range(n)]
    blob = bytearray(b"".join(parts))
    offsets = array("Q", [0])
    for part in parts:
        offsets.append(offsets[-1] + len(part))
    tokens = PackedTokens(records, values=EncodedValues(blob, offsets))
    return Run("r", 3, "s", tokens=tokens), records, blob, offsets


def _flip(buffer: Any) -> None:
    """Change the buffer's last byte (same length: a value of another int, a seq)."""
    view = memoryview(buffer).cast("B")
    view[-1] ^= 0x01


class _MutatingStream(io.BytesIO):
    """A stream whose first ``write`` (the header, digests included) changes a buffer."""

    def __init__(self, buffer: Any) -> None:
        super().__init__()
        self._buffer: Any = buffer

    def write(self, data: Any) -> int:
        if self._buffer is not None:
            _flip(self._buffer)
            self._buffer = None
        return super().write(data)


@pytest.mark.parametrize("which", ["records", "blob", "offsets"])
def test_a_buffer_changed_during_a_stream_write_is_refused_naming_its_section(
    which: str,
) -> None:
    """The stream's write changes a buffer after the header: IntegrityError, stream emptied."""
    run, records, blob, offsets = _run()
    buffer = {"records": records, "blob": blob, "offsets": offsets}[which]
    out = _MutatingStream(buffer)
    out.write(b"before")
    out._buffer = buffer  # the next write is the document's header
    with pytest.raises(IntegrityError) as err:
        write_document(run, out, encoding="cprun")
    section = {"records": "token records", "blob": "values", "offsets": "value offsets"}[which]
    assert err.value.where == section
    assert out.getvalue() == b"before"


def test_a_buffer_changed_after_its_digest_leaves_no_file_at_the_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """To a path: refused, no file and no temporary file (an existing file kept as it was)."""
    run, records, _, _ = _run()
    target = tmp_path / "r.cprun"
    target.write_bytes(b"old")
    digest = cprun.native_digest  # type: ignore[attr-defined]
    hits: list[int] = []

    def digest_then_change(data: Any) -> Any:
        got = digest(data)
        if memoryview(data).nbytes == len(records) and not hits:
            hits.append(1)
            _flip(records)  # after its digest went into the header
        return got

    monkeypatch.setattr(cprun, "native_digest", digest_then_change)
    with pytest.raises(IntegrityError) as err:
        write_document(run, target, encoding="cprun")
    assert hits and err.value.where == "token records"
    assert sorted(os.listdir(tmp_path)) == ["r.cprun"]
    assert target.read_bytes() == b"old"


def test_dump_cprun_refuses_a_buffer_changed_after_its_digest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """dump_document(..., "cprun") gives the bytes it checked, or IntegrityError."""
    run, _, blob, _ = _run()
    digest = cprun.native_digest  # type: ignore[attr-defined]
    hits: list[int] = []

    def digest_then_change(data: Any) -> Any:
        got = digest(data)
        if memoryview(data).nbytes == len(blob) and not hits:
            hits.append(1)
            _flip(blob)
        return got

    monkeypatch.setattr(cprun, "native_digest", digest_then_change)
    with pytest.raises(IntegrityError) as err:
        dump_document(run, encoding="cprun")
    assert hits and err.value.where == "values"


def test_a_thread_changing_a_buffer_gives_a_good_file_or_a_clear_error(tmp_path: Path) -> None:
    """Racing writes against a thread flipping a values byte: each outcome is a file that
    loads with every value checked, or IntegrityError; never a damaged file."""
    run, _, blob, _ = _run(20_000)
    stop = threading.Event()

    def flip() -> None:
        while not stop.is_set():
            _flip(blob)

    thread = threading.Thread(target=flip)
    thread.start()
    outcomes = set()
    try:
        for i in range(30):
            target = tmp_path / f"r{i}.cprun"
            try:
                write_document(run, target, encoding="cprun")
            except IntegrityError as exc:
                assert exc.where in ("values", "token records")
                assert not target.exists()
                outcomes.add("refused")
                continue
            loaded = load_document(target)  # every section's digest checked
            assert len(loaded.tokens) == len(run.tokens)
            outcomes.add("written")
    finally:
        stop.set()
        thread.join()
    assert outcomes <= {"refused", "written"}
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
