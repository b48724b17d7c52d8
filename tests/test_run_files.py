"""Packed run files (.cprun) and ``cpstore convert``: pinned bytes, content detection,
round trips through every format, and damaged files refused naming the section."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import msgpack
import pytest

from cpstore.cli.entry import main
from cpstore.errors import DocumentError, FormatVersionError
from cpstore.run.cprun import CPRUN_MAGIC, dump_cprun, parse_cprun
from cpstore.run.document import dump_document, load_document, parse_document
from cpstore.run.model import Effect, Observation, PackedTokens, ReplayMode, Run, Token
from cpstore.run.values import EncodedValues


def _run() -> Run:
    return Run(
        "run-1",
        7,
        "state",
        tokens=PackedTokens.from_tokens(
            [
                Token(0, "rng", 4),
                Token(1, "clock", 1.5, "live"),
                Token(2, "my.tool", {"q": [1, None]}),
            ]
        ),
        observations=(Observation(1, "tool", "p1", 2.0), Observation(2, "cfg", "p2", None)),
        call_graph=({"step": 1, "node": "a"},),
        transcript_digest="t",
        effects=(Effect(0, "db", "e0"),),
        ledger_sealed=True,
        harness_accesses=({"resource": "x"},),
        provenance_tags=("replay:1",),
        mode=ReplayMode.STRICT,
    )


def _same(a: Run, b: Run) -> None:
    assert bytes(a.tokens.view()) == bytes(b.tokens.view())
    assert list(a.tokens.values or []) == list(b.tokens.values or [])
    assert dict(a.tokens.kind_names) == dict(b.tokens.kind_names)
    for name in (
        "run_id", "step", "state_digest", "observations", "call_graph", "transcript_digest",
        "effects", "ledger_sealed", "harness_accesses", "provenance_tags", "mode",
    ):  # fmt: skip
        assert getattr(a, name) == getattr(b, name), name


# The whole file for _run(), format 1: any change of bytes must be deliberate
# (bump CPRUN_VERSION, keep reading version 1, update docs/run-document.md).
GOLDEN_HEAD = "435052554e000d0a 0100 0400 00000000"


def test_packed_run_file_bytes_are_pinned() -> None:
    """Header, section table and sections of a small run are exactly the documented bytes."""
    data = dump_cprun(_run())
    assert data[:16].hex() == GOLDEN_HEAD.replace(" ", "")
    assert data[:8] == CPRUN_MAGIC
    # section table: (kind, 0, offset, length, digest) x 4, sections 8-aligned after 176
    offsets = []
    for i in range(4):
        kind, reserved, offset, size, _ = struct.unpack_from("<IIQQ16s", data, 16 + 40 * i)
        assert (kind, reserved) == (i + 1, 0) and offset % 8 == 0
        offsets.append((offset, size))
    assert offsets[0][0] == 176
    assert offsets[1][1] == 3 * 32 and offsets[2][1] == 4 * 8
    assert data[offsets[1][0] : offsets[1][0] + 96] == bytes(_run().tokens.view())
    assert len(data) == offsets[3][0] + offsets[3][1]
    assert data.hex() == GOLDEN_FILE


GOLDEN_FILE = (
    "435052554e000d0a01000400000000000100000000000000b000000000000000fd00000000000000992d4ba1"
    "0835059fa4b463d8614087a90200000000000000b00100000000000060000000000000008ed7af81787c58e5"
    "cb6ba9d25c3849ae030000000000000010020000000000002000000000000000f0e9f74f50ee4b3f8aeea3b4"
    "dce1517f0400000000000000300200000000000010000000000000002c3967c61ee75384ad84a2b7ebc69660"
    "8ca46d6f6465a6737472696374a47374657007a672756e5f6964a572756e2d31a765666665637473919300a2"
    "6462a26530aa63616c6c5f67726170689182a46e6f6465a161a47374657001aa6b696e645f6e616d657381ce"
    "c2791134a76d792e746f6f6cac6f62736572766174696f6e73929401a4746f6f6ca27031cb40000000000000"
    "009402a3636667a27032c0ac73746174655f646967657374a57374617465ad6c65646765725f7365616c6564"
    "c3af70726f76656e616e63655f7461677391a87265706c61793a31b06861726e6573735f6163636573736573"
    "9181a87265736f75726365a178b17472616e7363726970745f646967657374a1740000000000000000000000"
    "01000000010000002ff39367394f506c73b2284b32bf8672010000000000000002000000020000008b473c07"
    "bfa5c5676c4c99303b8fcc400200000000000000341179c2010000008c798f4602f3ad965e81787b9078cc3f"
    "000000000000000001000000000000000a00000000000000100000000000000004cb3ff800000000000081a1"
    "719201c0"
)


@pytest.mark.parametrize("encoding", ["json", "msgpack", "cprun"])
def test_every_format_round_trips_every_field(encoding: str) -> None:
    """dump_document then load_document keeps every field, through each format."""
    run = _run()
    again = load_document(dump_document(run, encoding=encoding))
    _same(again, run)


def test_a_packed_run_file_is_told_by_content_not_extension(tmp_path: Path) -> None:
    """A .cprun named r.json is mapped as a packed run file; its values stay a blob."""
    path = tmp_path / "r.json"
    path.write_bytes(dump_cprun(_run()))
    run = load_document(path)
    assert isinstance(run.tokens.values, EncodedValues)
    _same(run, _run())


def test_a_packed_run_file_is_not_held_to_the_document_size_limit(tmp_path: Path) -> None:
    """max_bytes bounds parsing; a mapped packed file is not parsed, so it is not refused."""
    path = tmp_path / "r.cprun"
    path.write_bytes(dump_cprun(_run()))
    _same(load_document(path, max_bytes=10), _run())
    with pytest.raises(DocumentError, match="too large"):
        load_document(dump_document(_run(), encoding="json"), max_bytes=10)


def _damaged(data: bytes, at: int, value: int) -> bytes:
    out = bytearray(data)
    out[at] = value
    return bytes(out)


@pytest.mark.parametrize("section", [0, 1, 2, 3])
def test_a_damaged_section_is_refused_naming_it(section: int) -> None:
    """One flipped byte in any section fails its digest; the error names the section."""
    data = dump_cprun(_run())
    _, _, offset, size, _ = struct.unpack_from("<IIQQ16s", data, 16 + 40 * section)
    bad = _damaged(data, offset + size // 2, data[offset + size // 2] ^ 0xFF)
    names = ["metadata", "token records", "value offsets", "values"]
    with pytest.raises(DocumentError, match="digest mismatch") as err:
        parse_cprun(bad)
    assert err.value.where is not None and err.value.where.endswith(names[section])


def test_truncated_version_and_trailing_bytes_are_refused() -> None:
    """A short file, an unknown version and bytes after the last section are refused."""
    data = dump_cprun(_run())
    with pytest.raises(DocumentError, match=r"outside the file|truncated"):
        parse_cprun(data[:-3])
    with pytest.raises(DocumentError, match="truncated"):
        parse_cprun(data[:20])
    with pytest.raises(FormatVersionError):
        parse_cprun(data[:8] + b"\x02\x00" + data[10:])
    with pytest.raises(DocumentError, match="after the last section"):
        parse_cprun(data + bytes(8))


def _cli(*args: str) -> int:
    return main(["convert", *args])


def test_convert_goes_between_all_three_formats(tmp_path: Path) -> None:
    """IN -> OUT for every pair keeps the run; JSON/msgpack output equals dump_document's bytes."""
    run = _run()
    src = tmp_path / "r.json"
    src.write_bytes(dump_document(run, encoding="json"))
    current = src
    for step, ext in enumerate(["cprun", "msgpack", "json", "msgpack", "cprun", "json"]):
        out = tmp_path / f"o{step}.{ext}"
        assert _cli(str(current), str(out)) == 0
        again = load_document(out)
        _same(again, run)
        if ext == "json":
            assert out.read_bytes() == dump_document(run, encoding=ext)
        elif ext == "msgpack":  # map order follows the source's, so compare decoded
            assert msgpack.unpackb(out.read_bytes()) == msgpack.unpackb(
                dump_document(run, encoding=ext)
            )
        current = out


def test_convert_streams_a_document_larger_than_one_chunk(tmp_path: Path) -> None:
    """A 40 000-token document survives JSON -> cprun -> msgpack -> JSON byte for byte."""
    tokens = [
        {"seq": i, "kind": "rng", "value": i * 3, "provenance": "recorded"} for i in range(40_000)
    ]
    doc = json.loads(dump_document(_run(), encoding="json"))
    doc["tokens"] = tokens
    first = dump_document(parse_document(doc), encoding="json")
    (tmp_path / "a.json").write_bytes(first)
    assert _cli(str(tmp_path / "a.json"), str(tmp_path / "b.cprun")) == 0
    assert _cli(str(tmp_path / "b.cprun"), str(tmp_path / "c.msgpack")) == 0
    assert _cli(str(tmp_path / "c.msgpack"), str(tmp_path / "d.json")) == 0
    assert (tmp_path / "d.json").read_bytes() == first
    assert (
        msgpack.unpackb((tmp_path / "c.msgpack").read_bytes())["tokens"][39_999]["value"] == 119_997
    )


def test_convert_refuses_to_overwrite_guess_or_read_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Existing OUT needs --force, an unknown extension needs --to, a missing IN is exit 4."""
    src = tmp_path / "r.json"
    src.write_bytes(dump_document(_run(), encoding="json"))
    out = tmp_path / "o.cprun"
    out.write_bytes(b"keep")
    assert _cli(str(src), str(out)) == 3
    assert out.read_bytes() == b"keep"
    assert _cli(str(src), str(out), "--force") == 0
    assert _cli(str(src), str(tmp_path / "o.bin")) == 3
    assert _cli(str(src), str(tmp_path / "o.bin"), "--to", "msgpack") == 0
    assert _cli(str(tmp_path / "missing.json"), str(tmp_path / "x.json")) == 4
    assert "convert" in capsys.readouterr().err


def test_a_failed_conversion_leaves_no_file(tmp_path: Path) -> None:
    """A run JSON cannot hold (bytes values) exits 3 and leaves neither OUT nor a temp file."""
    run = Run("r", 1, "s", tokens=PackedTokens.from_tokens([Token(0, "rng", b"\x00")]))
    src = tmp_path / "r.msgpack"
    src.write_bytes(dump_document(run, encoding="msgpack"))
    assert _cli(str(src), str(tmp_path / "o.json")) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.msgpack"]


def test_convert_refuses_an_empty_or_folder_out_before_writing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """An empty IN or OUT, or OUT a folder, is exit 3 naming it; no temp file is left.

    Before, OUT "" (an unset variable) was the working folder: refused as existing, and
    with --force renamed onto it (EBUSY, exit 7, naming a temp file); OUT a folder with
    --force failed naming the temp file ("Is a directory: .d.XXXX.tmp")."""
    src = tmp_path / "r.json"
    src.write_bytes(dump_document(_run(), encoding="json"))
    folder = tmp_path / "d"
    folder.mkdir()
    monkeypatch.chdir(tmp_path)
    assert _cli(str(src), "", "--to", "json", "--force") == 3
    assert "OUT is an empty path" in capsys.readouterr().err
    assert _cli("", str(tmp_path / "o.json")) == 3
    assert "IN is an empty path" in capsys.readouterr().err
    assert _cli(str(src), str(folder), "--to", "json", "--force") == 3
    err = capsys.readouterr().err
    assert "OUT is a folder" in err and ".tmp" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["d", "r.json"]
    assert list(folder.iterdir()) == []
