"""audit33: a pinned_at integer past the float range is bad input, not a crash.

audit31 refused a JSON number literal past the float range (1e400) and made a Run
check pinned_at as a document does. The integer spelling of the same number
(1 and 400 zeros; JSON ints are unbounded, msgpack's are not) reached
``math.isfinite`` in ``pinned_or_none`` and raised a bare OverflowError: a Run, a
JSON document and ``cpstore validate`` (a traceback, exit 1 "internal error")
all failed where a malformed pin is a DocumentError (exit 3).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from cpstore.errors import DocumentError
from cpstore.run.document import dump_document, load_document
from cpstore.run.model import Observation, PackedTokens, Run

_DIGEST = "ab" * 16


def _doc(pin: str) -> bytes:
    obs = (Observation(0, "src", _DIGEST, 2.0),)
    good = dump_document(Run("r", 1, "s", tokens=PackedTokens.from_tokens([]), observations=obs))
    assert good.count(b'"pinned_at": 2.0') == 1
    return good.replace(b'"pinned_at": 2.0', b'"pinned_at": ' + pin.encode())


@pytest.mark.parametrize("pin", [10**400, -(10**400), 2**1024])
def test_a_run_with_a_huge_int_pin_is_a_document_error(pin: int) -> None:
    with pytest.raises(DocumentError, match=r"pinned_at|float"):
        Run("r", 1, "s", observations=(Observation(0, "src", _DIGEST, pin),))


@pytest.mark.parametrize("pin", ["1" + "0" * 400, "-1" + "0" * 400])
def test_a_document_with_a_huge_int_pin_is_a_document_error(pin: str) -> None:
    with pytest.raises(DocumentError) as info:
        load_document(_doc(pin))
    assert "observations[0].pinned_at" in str(info.value)


@pytest.mark.parametrize("pin", [2**63, 2**64 - 1, -(2**63), 2**1023, 0])
def test_large_int_pins_in_the_float_range_still_load(pin: int) -> None:
    run = load_document(_doc(str(pin)))
    assert run.observations[0].pinned_at == float(pin)
    Run("r", 1, "s", observations=(Observation(0, "src", _DIGEST, pin),))  # no error


def test_the_cli_says_it_in_one_line_exit_3(tmp_path: Path) -> None:
    doc = tmp_path / "big.json"
    doc.write_bytes(_doc("1" + "0" * 400))
    out = subprocess.run(
        [sys.executable, "-m", "cpstore.cli", "validate", str(doc), str(doc)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 3, out.stderr
    assert "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
