"""``cpstore convert`` and ``ReplaySession.write`` write a path as ``write_document`` does.

``convert`` kept a temporary-file write of its own (``tempfile.mkstemp``): its OUT was
created readable by its owner only (0600, where ``write_document`` and ``open(..., "wb")``
give 0666 less the umask), a replaced OUT lost its permissions, and a symlink OUT was
replaced by a regular file where ``write_document`` writes through it. It now calls
``write_document`` with the path. ``ReplaySession.write`` already handed its ``out`` to
``write_document``; it is typed and documented as taking a path now.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

import cpstore
from cpstore.cli.entry import main
from cpstore.errors import IntegrityError
from cpstore.run.document import load_document
from cpstore.run.model import Run


def _document(tmp_path: Path) -> Path:
    doc = {
        "format": 1,
        "run_id": "r",
        "step": 3,
        "state_digest": "s",
        "observations": [],
        "tokens": [{"seq": 0, "kind": "rng", "value": 5, "provenance": "recorded"}],
        "call_graph": [],
        "transcript_digest": None,
        "effects": [],
    }
    path = tmp_path / "in.json"
    path.write_text(json.dumps(doc))
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("suffix", [".cprun", ".json", ".msgpack"])
def test_a_new_out_is_created_as_open_creates_a_file(tmp_path: Path, suffix: str) -> None:
    """0666 less the umask, as write_document (and open(..., "wb")) create it (was 0600)."""
    out = tmp_path / f"out{suffix}"
    assert main(["convert", str(_document(tmp_path)), str(out)]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o666 & ~_umask()
    assert load_document(out).tokens.values == [5]


def test_a_replaced_out_keeps_its_permissions(tmp_path: Path) -> None:
    out = tmp_path / "out.cprun"
    out.write_bytes(b"old")
    out.chmod(0o640)
    assert main(["convert", str(_document(tmp_path)), str(out), "--force"]) == 0
    assert stat.S_IMODE(out.stat().st_mode) == 0o640
    assert load_document(out).tokens.values == [5]


def test_a_symlink_out_is_written_through(tmp_path: Path) -> None:
    """The link stays and its target holds the run (convert replaced the link by a file)."""
    target = tmp_path / "target.cprun"
    target.write_bytes(b"old")
    link = tmp_path / "link.cprun"
    link.symlink_to(target)
    assert main(["convert", str(_document(tmp_path)), str(link), "--force"]) == 0
    assert link.is_symlink()
    assert load_document(target).tokens.values == [5]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.json", "link.cprun", "target.cprun"]


def test_a_session_writes_a_path_through_a_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ReplaySession.write(path): a loadable file; a failed write leaves the old file."""
    with cpstore.open(str(tmp_path / "s")) as store:
        rec = store.recorder("r")
        rec.token("rng", 1)
        cid = str(rec.checkpoint(3, {"a": 1}))
        with store.read(cid) as cp:
            session = cpstore.ReplaySession(cp)
            session.cursor.resolve("rng")
            out = tmp_path / "p.cprun"
            digest = cpstore.state_digest({"a": 1})
            assert session.write(out, digest) == out.stat().st_size
            assert isinstance(load_document(out), Run)
            before = out.read_bytes()

            def refuse(*_: object) -> None:
                raise IntegrityError("refused")

            monkeypatch.setattr("cpstore.run.cprun._header", refuse)
            with pytest.raises(IntegrityError):
                session.write(out, digest)
            assert out.read_bytes() == before
            assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []
        assert cpstore.validate(cid, load_document(out), store=store).verdict.name == "ACCEPT"
