"""A document is written from the values and records that were checked (review79's leftover).

The writers check a run's values against its records before a byte is written
(``check_keys``, ``check_faithful``), then read ``tokens.values`` and the records again
to write them. A ``values`` Sequence answering other values on a later read, or a
caller changing a value (or a dict inside one, or a record) while the document is
written, from its ``out.write`` or another thread, gave a document of values never
checked: read back, its records were another run's, a REJECT replay written as an
ACCEPT. left83: each chunk is read once, checked again, and its values are written
decoded from the very canonical bytes compared with the records; a chunk that changed
is refused (``IntegrityError``), nothing of it written.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cpstore.decision.validate import validate
from cpstore.errors import IntegrityError
from cpstore.run.document import dump_document, load_document
from cpstore.run.model import PackedTokens, Run, Token
from cpstore.run.writer import write_document

STATE = "00" * 16
ENCODINGS = ("json", "msgpack")


def _run(values: list[Any]) -> Run:
    tokens = [Token(i, "rng", v, "recorded") for i, v in enumerate(values)]
    return Run("r", 0, STATE, tokens=PackedTokens.from_tokens(tokens))


def _with_values(run: Run, values: Sequence[Any]) -> Run:
    tokens = PackedTokens(run.tokens.records, values=values, kind_names=run.tokens.kind_names)
    return Run(run.run_id, run.step, run.state_digest, tokens=tokens)


class Flip(Sequence[Any]):
    """The run's values for the first ``honest`` reads of each item, ``forged`` after."""

    def __init__(self, values: list[Any], honest: int, forged: list[Any]) -> None:
        self._values, self._honest, self._forged = values, honest, forged
        self._reads: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._values)

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if not -len(self) <= index < len(self):
            raise IndexError(index)
        reads = self._reads.get(index, 0)
        self._reads[index] = reads + 1
        return self._values[index] if reads < self._honest else self._forged[index]


def _write(run: Run, encoding: str, how: str, out: io.BytesIO | None = None) -> bytes:
    if how == "dump":
        return dump_document(run, encoding=encoding)
    out = out if out is not None else io.BytesIO()
    write_document(run, out, encoding=encoding)
    return out.getvalue()


def _says(raw: bytes, run: Run) -> bool:
    """The document read back has the run's records (so validate judges it as the run)."""
    return bytes(load_document(raw).tokens.records) == bytes(run.tokens.records)


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("how", ["dump", "write"])
@pytest.mark.parametrize("honest", [1, 2, 3, 4, 5])
def test_a_sequence_answering_otherwise_later(encoding: str, how: str, honest: int) -> None:
    """A replay recorded 1, 2, 3 (the recording said 7, 8, 9: a REJECT); its values
    answer 7, 8, 9 after a few reads. Written, its document was an ACCEPT."""
    recorded = _run([7, 8, 9])
    replay = _run([1, 2, 3])
    forged = _with_values(replay, Flip([1, 2, 3], honest, [7, 8, 9]))
    try:
        raw = _write(forged, encoding, how)
    except IntegrityError:
        return  # refused: nothing that says another run
    assert _says(raw, replay)
    assert validate(recorded, load_document(raw)).verdict.name == "REJECT"


class _Meddler(io.BytesIO):
    """An output whose first write runs ``change`` (a caller's callback, another thread)."""

    def __init__(self, change: Any) -> None:
        super().__init__()
        self._change = change

    def write(self, data: Any) -> int:
        change, self._change = self._change, None
        if change is not None:
            change()
        return super().write(data)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_list_changed_while_the_head_is_written(encoding: str) -> None:
    values: list[Any] = [1, 2, 3]
    run = _with_values(_run([1, 2, 3]), values)
    out = _Meddler(lambda: values.__setitem__(1, 99))
    with pytest.raises(IntegrityError, match="changed while its document was written") as err:
        write_document(run, out, encoding=encoding)
    assert err.value.where == "tokens[1].value"
    assert b"99" not in out.getvalue().split(b"tokens")[-1]


@pytest.mark.parametrize("json", [True, False])
def test_a_nested_dict_changed_after_its_chunk_was_checked(json: bool) -> None:
    """The value written is decoded from the bytes checked, never the caller's object:
    a dict inside a value changed once its chunk was read is written as it was."""
    from cpstore.run.faithful import token_chunks  # noqa: PLC0415 (new in left83)

    inner = {"a": 1}
    run = _run([inner, 2])
    chunks = token_chunks(run.tokens, json=json)
    chunk = next(chunks)
    inner["a"] = 99
    assert chunk[0]["value"] == {"a": 1}
    assert chunk[0]["value"] is not inner


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_a_nested_dict_changed_while_the_head_is_written(encoding: str) -> None:
    inner = {"a": 1}
    run = _run([inner, 2])
    out = _Meddler(lambda: inner.__setitem__("a", 99))
    with pytest.raises(IntegrityError, match="changed while its document was written") as err:
        write_document(run, out, encoding=encoding)
    assert err.value.where == "tokens[0].value"


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_records_changed_while_the_head_is_written(encoding: str) -> None:
    run = _run([1, 2, 3])
    records = bytearray(run.tokens.records)
    changed = Run("r", 0, STATE, tokens=PackedTokens(records, values=[1, 2, 3]))
    out = _Meddler(lambda: records.__setitem__(slice(32 + 16, 64), bytes(16)))
    with pytest.raises(IntegrityError, match="changed while its document was written"):
        write_document(changed, out, encoding=encoding)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    values=st.lists(st.integers(-5, 5) | st.text(max_size=2), max_size=40),
    honest=st.integers(0, 5),
    encoding=st.sampled_from(ENCODINGS),
    how=st.sampled_from(["dump", "write"]),
    data=st.data(),
)
def test_whatever_is_written_says_the_run(
    values: list[Any], honest: int, encoding: str, how: str, data: st.DataObject
) -> None:
    """Empty, tiny and forged-anywhere runs: refused, or read back as the run's records."""
    forged_values = [
        data.draw(st.integers(-5, 5)) if data.draw(st.booleans()) else v for v in values
    ]
    run = _run(values)
    forged = _with_values(run, Flip(values, honest, forged_values))
    try:
        raw = _write(forged, encoding, how)
    except IntegrityError:
        assert forged_values != values or honest == 0
        return
    assert _says(raw, run)


def test_a_huge_run_writes_as_before() -> None:
    """40,000 tokens (three write chunks): the same bytes through both writers."""
    run = _run([i if i % 3 else {"k": [i, str(i)]} for i in range(40_000)])
    for encoding in ENCODINGS:
        raw = _write(run, encoding, "write")
        assert raw == _write(run, encoding, "dump")
        assert _says(raw, run)
