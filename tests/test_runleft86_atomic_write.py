"""A failed write leaves no partial file claiming to be a run (runleft86).

``cpstore convert`` wrote OUT to a temporary file and renamed it into place, but the plain
writers (``write_document``, ``ReplaySession.write``) wrote straight into the caller's
stream: a value changed after the head was written (``IntegrityError`` "the run's tokens
changed while its document was written") or a full disk left the head and the chunks
before it, a file that starts like a run document. ``write_document`` now takes a path
too, written through a temporary file in the same folder and renamed only when complete
(removed on failure, an existing file left as it was); on a stream a failure takes a
seekable stream back to where the document began.
"""

from __future__ import annotations

import io
import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any, overload

import pytest

from cpstore.errors import IntegrityError, InvalidInputError, NotFoundError
from cpstore.run.document import dump_document, load_document
from cpstore.run.model import PackedTokens, Run, Token
from cpstore.run.writer import write_document

ENCODINGS = ["json", "msgpack", "cprun"]


class _Changing(Sequence[Any]):
    """Token values that answer ``later`` once they have been read in slices ``reads``
    times: the writers' check reads them, then the writing reads other values."""

    def __init__(self, first: list[Any], later: list[Any], reads: int = 1) -> None:
        self._first, self._later, self._reads = first, later, reads

    def __len__(self) -> int:
        return len(self._first)

    @overload
    def __getitem__(self, index: int) -> Any: ...
    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...
    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            self._reads -= 1
            return (self._first if self._reads >= 0 else self._later)[index]
        return self._first[index]


def _run(values: Sequence[Any]) -> Run:
    records = [Token(i, "rng", 0 if isinstance(v, set) else v) for i, v in enumerate(values)]
    packed = PackedTokens.from_tokens(records)
    return Run("r", 3, "s", tokens=PackedTokens(packed.records, values=values))


def _changing_run() -> Run:
    return _run(_Changing([1, 2, 3], [1, 2, 4]))


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_a_value_changed_mid_write_leaves_no_file_and_no_temp(
    tmp_path: Path, encoding: str
) -> None:
    out = tmp_path / f"r.{encoding}"
    with pytest.raises(IntegrityError, match="changed while its document was written"):
        write_document(_changing_run(), out, encoding=encoding)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_a_failed_write_keeps_the_existing_file(tmp_path: Path, encoding: str) -> None:
    out = tmp_path / "r.doc"
    good = dump_document(_run([7, 8]), encoding=encoding)
    out.write_bytes(good)
    with pytest.raises(IntegrityError):
        write_document(_changing_run(), out, encoding=encoding)
    assert out.read_bytes() == good
    assert _leftovers(tmp_path) == ["r.doc"]


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_refused_run_creates_nothing(tmp_path: Path, encoding: str) -> None:
    run = _run([1, {2, 3}] if encoding == "cprun" else [1, b"x" if encoding == "json" else 2**70])
    (tmp_path / "keep").write_bytes(b"old")
    for name in ("new", "keep"):
        with pytest.raises(InvalidInputError):
            write_document(run, tmp_path / name, encoding=encoding)
    assert _leftovers(tmp_path) == ["keep"]
    assert (tmp_path / "keep").read_bytes() == b"old"


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_path_write_replaces_whole_and_keeps_permissions(tmp_path: Path, encoding: str) -> None:
    run = _run([1, "two", [3.5]])
    out = tmp_path / "r.out"
    out.write_bytes(b"x" * 100_000)
    out.chmod(0o640)
    size = write_document(run, out, encoding=encoding)
    data = out.read_bytes()
    assert data == dump_document(run, encoding=encoding) and size == len(data)
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert load_document(out).tokens.values == [1, "two", [3.5]]
    assert _leftovers(tmp_path) == ["r.out"]
    link = tmp_path / "link"
    link.symlink_to(out)
    write_document(_run([5]), str(link), encoding=encoding)  # through the link, kept
    assert link.is_symlink() and load_document(out).tokens.values == [5]


def test_a_folder_or_a_missing_folder_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="not a regular file"):
        write_document(_run([1]), tmp_path, encoding="json")
    with pytest.raises(NotFoundError):
        write_document(_run([1]), tmp_path / "no" / "r.json", encoding="json")
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_a_seekable_stream_is_taken_back_to_where_the_document_began(encoding: str) -> None:
    out = io.BytesIO()
    out.write(b"caller's own bytes")
    with pytest.raises(IntegrityError):
        write_document(_changing_run(), out, encoding=encoding)
    assert out.getvalue() == b"caller's own bytes"


@pytest.mark.parametrize("encoding", ["json", "msgpack"])
def test_an_opened_file_is_left_empty_not_partial(tmp_path: Path, encoding: str) -> None:
    out = tmp_path / "r.doc"
    with out.open("wb") as fh, pytest.raises(IntegrityError):
        write_document(_changing_run(), fh, encoding=encoding)
    assert out.read_bytes() == b""


_FULL_DISK = textwrap.dedent(
    """
    import os, resource, signal, sys
    from pathlib import Path
    from cpstore.run.model import PackedTokens, Run, Token
    from cpstore.run.writer import write_document

    folder, encoding = Path(sys.argv[1]), sys.argv[2]
    keep = folder / "keep"
    keep.write_bytes(b"an existing run")
    values = ["v" * 64] * 4000
    packed = PackedTokens.from_tokens([Token(i, "rng", v) for i, v in enumerate(values)])
    run = Run("r", 0, "s", tokens=packed)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails: EFBIG
    resource.setrlimit(resource.RLIMIT_FSIZE, (65536, resource.RLIM_INFINITY))
    for target in (folder / "new", keep):
        try:
            write_document(run, target, encoding=encoding)
        except OSError as exc:
            print("refused", exc.errno)
        else:
            print("written")
    """
)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_full_disk_mid_write_leaves_nothing(tmp_path: Path, encoding: str) -> None:
    """The file-size limit stands for a full disk: the write fails after the head and
    some tokens are out (a 300 KB document, a 64 KB limit), in each encoding."""
    got = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(tmp_path), encoding],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert got.stdout.split() == ["refused", "27", "refused", "27"], got.stderr
    assert _leftovers(tmp_path) == ["keep"]
    assert (tmp_path / "keep").read_bytes() == b"an existing run"
