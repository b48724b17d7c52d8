"""Bad input to the native core raises the documented ValueError subclasses.

User mistakes are caught in Python before any C call and raise
RecordFormatError or InvalidInputError (both ValueError) with a message that
names the argument; NativeError is reserved for faults in the core itself.
The reference twins raise the same classes, and ``python -O`` changes nothing.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cpstore
from cpstore import InvalidInputError
from cpstore.errors import NativeError, RecordFormatError
from cpstore.native import RecordType, reference
from cpstore.native import binding as native

QUICK = os.environ.get("CPSTORE_NATIVE_QUICK") == "1"
ROOT = Path(__file__).resolve().parent.parent

IMPLS = [pytest.param(native, id="native"), pytest.param(reference, id="reference")]
TOKEN = b"\x00" * 32


def _partial_digest(m: ModuleType) -> Any:
    hasher = m.SequenceHasher(RecordType.TOKEN)
    hasher.update(b"\x01" * 40)
    return hasher.digest()


#: (case id, call, expected class, word the message must contain)
CASES: list[tuple[str, Callable[[ModuleType], Any], type[Exception], str]] = [
    (
        "misaligned-sequence",
        lambda m: m.sequence_digest(1, b"x" * 33),
        RecordFormatError,
        "records",
    ),
    ("misaligned-a", lambda m: m.first_divergence(1, b"x" * 33, TOKEN), RecordFormatError, "at a"),
    ("misaligned-b", lambda m: m.first_divergence(1, TOKEN, b"x" * 31), RecordFormatError, "at b"),
    (
        "wrong-record-size",
        lambda m: m.first_divergence(RecordType.OBSERVATION, TOKEN, TOKEN),
        RecordFormatError,
        "observation",
    ),
    ("misaligned-scan", lambda m: m.scan_tokens(b"x" * 31), RecordFormatError, "records"),
    ("unknown-type-sequence", lambda m: m.sequence_digest(9, b""), RecordFormatError, "rtype"),
    ("unknown-type-zero", lambda m: m.SequenceHasher(0), RecordFormatError, "rtype"),
    ("unknown-type-compare", lambda m: m.first_divergence(7, b"", b""), RecordFormatError, "rtype"),
    ("type-as-name", lambda m: m.sequence_digest("token", b""), RecordFormatError, "rtype"),
    ("type-as-bool", lambda m: m.sequence_digest(True, b""), RecordFormatError, "rtype"),
    ("type-as-float", lambda m: m.sequence_digest(1.0, b""), RecordFormatError, "rtype"),
    (
        "unknown-field",
        lambda m: m.first_divergence(1, b"", b"", fields=["nope"]),
        RecordFormatError,
        "fields",
    ),
    (
        "unknown-field-str",
        lambda m: m.first_divergence(1, b"", b"", fields="nope"),
        RecordFormatError,
        "fields",
    ),
    (
        "field-of-other-type",
        lambda m: m.first_divergence(2, b"", b"", fields=["kind"]),
        RecordFormatError,
        "fields",
    ),
    (
        "fields-not-iterable",
        lambda m: m.first_divergence(1, b"", b"", fields=5),
        RecordFormatError,
        "fields",
    ),
    ("str-digest", lambda m: m.digest("abc"), InvalidInputError, "data"),
    ("int-digest", lambda m: m.digest(5), InvalidInputError, "data"),
    ("str-batch", lambda m: m.digest_batch("abc", [0, 1]), InvalidInputError, "data"),
    ("str-sequence", lambda m: m.sequence_digest(1, "x" * 32), InvalidInputError, "records"),
    ("str-a", lambda m: m.first_divergence(1, "", b""), InvalidInputError, "a must"),
    ("str-b", lambda m: m.first_divergence(1, b"", ""), InvalidInputError, "b must"),
    ("str-scan", lambda m: m.scan_tokens(""), InvalidInputError, "records"),
    ("str-update", lambda m: m.SequenceHasher(1).update("x"), InvalidInputError, "data"),
    ("strided-digest", lambda m: m.digest(memoryview(b"abcdef")[::2]), InvalidInputError, "data"),
    (
        "strided-b",
        lambda m: m.first_divergence(1, b"", memoryview(TOKEN * 2)[::2]),
        InvalidInputError,
        "b must",
    ),
    (
        "strided-scan",
        lambda m: m.scan_tokens(memoryview(TOKEN * 2)[::2]),
        InvalidInputError,
        "records",
    ),
    (
        "strided-offsets",
        lambda m: m.digest_batch(b"abcdef", memoryview(b"\0" * 32)[::2]),
        InvalidInputError,
        "offsets",
    ),
    (
        "strided-update",
        lambda m: m.SequenceHasher(1).update(memoryview(TOKEN * 2)[::2]),
        InvalidInputError,
        "data",
    ),
    (
        "decreasing-offsets",
        lambda m: m.digest_batch(b"abcdef", [0, 3, 2]),
        InvalidInputError,
        "offsets[2]",
    ),
    (
        "offsets-past-end",
        lambda m: m.digest_batch(b"abcdef", [0, 7]),
        InvalidInputError,
        "offsets[1]",
    ),
    ("start-past-end", lambda m: m.digest_batch(b"abcdef", [9]), InvalidInputError, "offsets[0]"),
    ("empty-offsets", lambda m: m.digest_batch(b"abcdef", []), InvalidInputError, "offsets"),
    ("negative-offset", lambda m: m.digest_batch(b"abcdef", [-1, 2]), InvalidInputError, "offsets"),
    ("huge-offset", lambda m: m.digest_batch(b"abcdef", [0, 2**64]), InvalidInputError, "offsets"),
    (
        "offsets-buffer-ragged",
        lambda m: m.digest_batch(b"abcdef", b"1234567"),
        InvalidInputError,
        "offsets",
    ),
    ("offsets-none", lambda m: m.digest_batch(b"abcdef", None), InvalidInputError, "offsets"),
    ("offsets-floats", lambda m: m.digest_batch(b"abcdef", [0.5, 1]), InvalidInputError, "offsets"),
    ("partial-record-at-digest", _partial_digest, RecordFormatError, "sequence so far"),
]


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(("call", "cls", "word"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_raises_documented_value_error(
    impl: ModuleType, call: Callable[[ModuleType], Any], cls: type[Exception], word: str
) -> None:
    """Each user mistake raises its ValueError subclass naming the argument, never NativeError."""
    with pytest.raises(cls) as info:
        call(impl)
    assert isinstance(info.value, ValueError)
    assert not isinstance(info.value, NativeError)
    assert word in str(info.value)


def test_partial_record_leaves_hasher_usable() -> None:
    """After the partial-record error, completing the record gives the right digest."""
    hasher = cpstore.native.SequenceHasher(RecordType.TOKEN)
    hasher.update(b"\x01" * 40)
    with pytest.raises(RecordFormatError):
        hasher.digest()
    hasher.update(b"\x01" * 24)
    assert hasher.count == 2
    assert hasher.digest() == reference.sequence_digest(RecordType.TOKEN, b"\x01" * 64)


def test_unknown_simd_level_is_invalid_input() -> None:
    """select_simd rejects an unknown level with InvalidInputError and keeps the kernel."""
    before = cpstore.native.simd_path()
    with pytest.raises(InvalidInputError, match="SIMD level"):
        cpstore.native.select_simd("sse9")
    assert cpstore.native.simd_path() == before


_ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=8),
    st.binary(max_size=80),
    st.lists(st.integers(-5, 2**65), max_size=5),
    st.binary(max_size=80).map(bytearray),
    st.binary(max_size=80).map(lambda b: memoryview(b)[::2]),
)


@settings(
    max_examples=20 if QUICK else 300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    which=st.sampled_from(["digest", "batch", "sequence", "compare", "scan", "hasher"]),
    x=_ANY,
    y=_ANY,
    z=_ANY,
)
def test_garbage_arguments_never_raise_native_error(which: str, x: Any, y: Any, z: Any) -> None:
    """Any argument mix either works (and agrees with the reference) or raises a ValueError."""

    def hasher(m: ModuleType) -> Any:
        h = m.SequenceHasher(x)
        h.update(y)
        return h.digest()

    calls: dict[str, Callable[[ModuleType], Any]] = {
        "digest": lambda m: m.digest(x),
        "batch": lambda m: m.digest_batch(x, y),
        "sequence": lambda m: m.sequence_digest(x, y),
        "compare": lambda m: m.first_divergence(x, y, z),
        "scan": lambda m: m.scan_tokens(x),
        "hasher": hasher,
    }
    outcomes = []
    for impl in (native, reference):
        try:
            outcomes.append(("ok", calls[which](impl)))
        except (InvalidInputError, RecordFormatError) as exc:
            outcomes.append(("error", type(exc)))
    assert outcomes[0] == outcomes[1]


def test_package_has_no_assert_statements() -> None:
    """No check in the package is an assert (python -O would strip it)."""
    for path in sorted((ROOT / "cpstore").glob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        asserts = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Assert)]
        assert not asserts, f"{path.name}: assert at lines {asserts}"


def test_behaviour_is_the_same_under_python_dash_o() -> None:
    """Under python -O every bad-input case still raises the same class and message."""
    script = textwrap.dedent(
        """
        import sys
        if sys.flags.optimize != 1:
            sys.exit("not running under -O")
        from cpstore.native import binding as _native
        from cpstore.native import reference as _reference
        sys.path.insert(0, sys.argv[1])
        from test_native_errors import CASES
        for name, call, cls, word in CASES:
            for impl in (_native, _reference):
                try:
                    call(impl)
                except cls as exc:
                    if word not in str(exc):
                        sys.exit(f"{name}: message {exc!s} lacks {word!r}")
                else:
                    sys.exit(f"{name}: {impl.__name__} raised nothing")
        print("ok", len(CASES))
        """
    )
    run = subprocess.run(
        [sys.executable, "-O", "-c", script, str(Path(__file__).parent)],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.strip() == f"ok {len(CASES)}"
