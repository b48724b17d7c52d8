"""audit41: a command's error whose ``got`` is a memoryview says the same across the fork.

audit39 (6b607ca) sends a child's error that would not survive pickling as a twin of its
class with ``expected``/``got`` as text. For a memoryview (what a zero-copy LMDB read hands
out, the usual ``got`` of a damaged record) that text is ``<memory at 0x...>``: the one line
an operator reads lost the damaged bytes the same error shows in process (their hex). The
twin now carries them as bytes, which pickle: the message is the in-process one.
"""

from __future__ import annotations

from typing import Any, NoReturn

import pytest

from cpstore.cli.child import Send, in_child
from cpstore.errors import IntegrityError


def _raise(exc: BaseException) -> Any:
    def work(_send: Send) -> NoReturn:
        raise exc

    return work


@pytest.mark.parametrize("field", ["got", "expected"])
def test_a_memoryview_in_a_child_error_reads_as_in_process(field: str) -> None:
    raw = memoryview(bytearray(b"\x00\x01\xfe"))
    here = IntegrityError("record damaged", where="checkpoints", **{field: raw})
    with pytest.raises(IntegrityError) as caught:
        in_child(_raise(here), store="s", doing="walking it", name="verify")
    assert str(caught.value) == str(here), str(caught.value)
    assert "0001fe" in str(caught.value)
