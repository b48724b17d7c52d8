"""A packed run file's refusal is the same from its path as from its bytes.

``load_document(path)`` turned any ValueError from reading the file that was not a
``DocumentError`` into ``DocumentError`` "not a usable path" (meant for a path holding a
NUL): a ``.cprun`` of an unknown version was ``FormatVersionError`` from its bytes and
"not a usable path" from its path, so ``cpstore`` exited 3, not 9 ("unknown format").
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from cpstore.cli.entry import main
from cpstore.cli.exit_codes import EXIT_FORMAT
from cpstore.errors import CpstoreError, FormatVersionError
from cpstore.run.document import dump_document, load_document
from cpstore.run.model import PackedTokens, Run, Token


def _cprun(version: int) -> bytes:
    run = Run("r", 3, "s", tokens=PackedTokens.from_tokens([Token(0, "rng", 1)]))
    data = bytearray(dump_document(run, encoding="cprun"))
    struct.pack_into("<H", data, 8, version)
    return bytes(data)


def _refusal(source: bytes | str) -> tuple[object, ...]:
    with pytest.raises(CpstoreError) as err:
        load_document(source)
    exc = err.value
    return type(exc), exc.what, exc.expected, exc.got


@pytest.mark.parametrize("version", [0, 2, 0xFFFF])
def test_an_unknown_version_is_refused_alike_from_a_path(tmp_path: Path, version: int) -> None:
    path = tmp_path / "r.cprun"
    path.write_bytes(_cprun(version))
    assert _refusal(str(path)) == _refusal(path.read_bytes())
    assert _refusal(str(path))[0] is FormatVersionError


def test_the_command_line_says_unknown_format(tmp_path: Path) -> None:
    path = tmp_path / "r.cprun"
    path.write_bytes(_cprun(2))
    assert main(["convert", str(path), str(tmp_path / "out.json")]) == EXIT_FORMAT
    assert not (tmp_path / "out.json").exists()


def _sections(data: bytes) -> list[tuple[int, int, int, int]]:
    return [struct.unpack_from("<IIQQ", data, 16 + 40 * i) for i in range(4)]


def test_bytes_between_sections_must_be_the_zero_padding() -> None:
    """The padding no digest covers: any byte in it, or a wider gap, is refused (both
    loaded as the same run, a file the format says cannot exist)."""
    good = dump_document(
        Run("r", 3, "s", tokens=PackedTokens.from_tokens([Token(0, "rng", 1)])), encoding="cprun"
    )
    load_document(good)
    (_, _, meta_at, meta_size), (_, _, records_at, _), *_ = _sections(good)
    assert records_at > meta_at + meta_size  # this run's metadata leaves padding
    damaged = bytearray(good)
    damaged[records_at - 1] = 0x5A
    with pytest.raises(CpstoreError) as err:
        load_document(bytes(damaged))
    assert err.value.where == "document: token records"
    # A gap of 8 more bytes, the later offsets moved (digests still right).
    wider = bytearray(good[:records_at] + bytes(8) + good[records_at:])
    for i in range(1, 4):
        struct.pack_into("<Q", wider, 16 + 40 * i + 8, _sections(good)[i][2] + 8)
    with pytest.raises(CpstoreError) as err:
        load_document(bytes(wider))
    assert err.value.what == "bytes between sections are not the zero padding"


@pytest.mark.parametrize(
    ("damaged", "named"),
    [
        ((1, 2, 3, 4), "metadata"),
        ((2, 4), "token records"),
        ((3, 4), "value offsets"),
        ((4,), "values"),
    ],
)
def test_several_damaged_sections_name_the_first_in_the_file(
    tmp_path: Path, damaged: tuple[int, ...], named: str
) -> None:
    """Checked in table order, which is the file's (a pin: it held before run88), from
    bytes and from the path alike."""
    run = Run("r", 3, "s", tokens=PackedTokens.from_tokens([Token(0, "rng", 1)]))
    data = bytearray(dump_document(run, encoding="cprun"))
    for kind, _, offset, size in _sections(bytes(data)):
        if kind in damaged:
            data[offset + size - 1] ^= 0x01
    path = tmp_path / "r.cprun"
    path.write_bytes(data)
    for source in (bytes(data), str(path)):
        with pytest.raises(CpstoreError) as err:
            load_document(source)
        assert err.value.what == "section digest mismatch (the file is damaged)"
        assert (err.value.where or "").endswith(f": {named}")
