"""A run whose values are not its records' is refused as damage, not for its format.

review79's leftover: "a forged token followed by a NaN is refused for the NaN in JSON".
The writers checked what the format holds (``check_keys``) before whether the values
are the records' (``check_faithful``): a run whose token 0 was forged and token 1 a NaN
was refused in JSON at ``tokens[1].value``, "use encoding='msgpack'" (exit 3), and in
msgpack at ``tokens[0].value`` as damage (``IntegrityError``, exit 5). The report was
wrong: no encoding can write that run, and the advice sent the user to a refusal of
another kind. left83: when the format refuses, the records are checked too, and
damage is what is reported, wherever it lies.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpstore.cli.entry import main
from cpstore.cli.exit_codes import EXIT_INTEGRITY
from cpstore.errors import IntegrityError, InvalidInputError
from cpstore.run.cprun import dump_cprun
from cpstore.run.document import dump_document
from cpstore.run.model import PackedTokens, Run, Token
from cpstore.run.writer import write_document

STATE = "00" * 16

#: Values a format cannot hold: (value, encoding that refuses it).
UNWRITABLE = [
    (math.nan, "json"),
    (math.inf, "json"),
    (b"raw", "json"),
    ({1: "a"}, "json"),
    ([0, {"k": -math.inf}], "json"),
    (2**64, "msgpack"),
    ({"big": -(2**63) - 1}, "msgpack"),
]


def _run(values: list[Any]) -> Run:
    tokens = [Token(i, "rng", v, "recorded") for i, v in enumerate(values)]
    return Run("r", 0, STATE, tokens=PackedTokens.from_tokens(tokens))


def _forged(values: list[Any], index: int, value: Any) -> Run:
    real = _run(values)
    given_values = list(values)
    given_values[index] = value
    tokens = PackedTokens(real.tokens.records, values=given_values)
    return Run("r", 0, STATE, tokens=tokens)


def _refusal(run: Run, encoding: str, how: str) -> tuple[type[Exception], str | None, bytes]:
    out = io.BytesIO()
    with pytest.raises((IntegrityError, InvalidInputError)) as err:
        if how == "dump":
            dump_document(run, encoding=encoding)
        else:
            write_document(run, out, encoding=encoding)
    return type(err.value), err.value.where, out.getvalue()


@pytest.mark.parametrize("how", ["dump", "write"])
@pytest.mark.parametrize(("bad", "encoding"), UNWRITABLE, ids=repr)
@pytest.mark.parametrize("forged_first", [True, False])
def test_damage_is_reported_wherever_it_lies(
    how: str, bad: Any, encoding: str, forged_first: bool
) -> None:
    values = [1, bad] if forged_first else [bad, 1]
    forged_at = 0 if forged_first else 1
    run = _forged(values, forged_at, 2)
    kind, where, written = _refusal(run, encoding, how)
    assert (kind, where, written) == (IntegrityError, f"tokens[{forged_at}].value", b"")


@pytest.mark.parametrize("how", ["dump", "write"])
@pytest.mark.parametrize(("bad", "encoding"), UNWRITABLE, ids=repr)
def test_an_honest_run_is_still_refused_for_its_format(how: str, bad: Any, encoding: str) -> None:
    kind, where, written = _refusal(_run([1, bad]), encoding, how)
    assert (kind, written) == (InvalidInputError, b"")
    assert where is not None and where.startswith("tokens[1].value")


def test_convert_exits_as_damage(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "forged.cprun"
    # A .cprun of the forged run: records of (1, NaN), values (2, NaN).
    source.write_bytes(dump_cprun(_forged([1, math.nan], 0, 2)))
    target = tmp_path / "out.json"
    code = main(["convert", str(source), str(target), "--to", "json"])
    assert code == EXIT_INTEGRITY, capsys.readouterr().err


_PLAIN = st.integers(-3, 3) | st.text(max_size=2) | st.booleans()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(_PLAIN, min_size=1, max_size=30),
    data=st.data(),
    encoding=st.sampled_from(["json", "msgpack"]),
    how=st.sampled_from(["dump", "write"]),
)
def test_forged_and_unwritable_anywhere(
    values: list[Any], data: st.DataObject, encoding: str, how: str
) -> None:
    """A run of tiny values with one forged token and (maybe) one the format cannot
    hold, anywhere: damage is reported at the forged token, nothing written."""
    n = len(values)
    bad_choices = [b for b, enc in UNWRITABLE if enc == encoding]
    if data.draw(st.booleans()):
        values[data.draw(st.integers(0, n - 1))] = data.draw(st.sampled_from(bad_choices))
    forged_at = data.draw(st.integers(0, n - 1))
    forged_value = data.draw(st.sampled_from(["forged", 99, None]))
    run = _forged(values, forged_at, forged_value)
    kind, where, written = _refusal(run, encoding, how)
    assert (kind, where, written) == (IntegrityError, f"tokens[{forged_at}].value", b"")
