"""audit39: a command's error in its forked child reaches the parent as that error.

``cli/child.py`` pickles the child's ``CpstoreError`` or ``OSError`` down a pipe. One
that did not survive the trip was misread: a ``CpstoreError`` whose ``got`` cannot be
pickled (a memoryview) failed in the child's send and became the child's traceback,
exit 1 ("a bug") for an integrity failure; an ``OSError`` subclass whose constructor
cannot be called again failed in the parent's unpickling, which ended its reading, and
became "the process ended without a result" (StoreError, exit 7). Now the child sends
what the parent can rebuild: the same class with ``expected``/``got`` as text, or the
plain ``OSError`` of its errno.
"""

from __future__ import annotations

import errno
from typing import Any, NoReturn

import pytest

from cpstore.cli.child import Send, in_child
from cpstore.errors import IntegrityError


class _TwoArgOSError(OSError):
    """An OSError whose constructor takes other arguments than its ``args``."""

    def __init__(self, path: str, *, why: str) -> None:
        super().__init__(errno.EIO, f"cannot read {path}: {why}")


def _raise(exc: BaseException) -> Any:
    def work(_send: Send) -> NoReturn:
        raise exc

    return work


def test_an_error_whose_got_cannot_be_pickled_is_still_that_error() -> None:
    got = memoryview(b"\x00\x01")
    with pytest.raises(IntegrityError) as caught:
        in_child(
            _raise(IntegrityError("page damaged", where="p", got=got)),
            store="s",
            doing="walking it",
            name="verify",
        )
    assert caught.value.what == "page damaged" and caught.value.where == "p"
    assert caught.value.got is not None


def test_an_oserror_that_cannot_be_rebuilt_is_still_an_oserror_of_its_errno() -> None:
    with pytest.raises(OSError) as caught:
        in_child(
            _raise(_TwoArgOSError("/x", why="gone")),
            store="s",
            doing="walking it",
            name="verify",
        )
    assert caught.value.errno == errno.EIO
    assert "cannot read /x: gone" in str(caught.value)


@pytest.mark.parametrize("code", [0, 4, None, "told why"])
def test_sys_exit_in_the_childs_work_exits_the_parent_so(code: int | str | None) -> None:
    """It was a bug's exit 1 ("the verify process failed" with SystemExit's traceback)."""
    with pytest.raises(SystemExit) as caught:
        in_child(_raise(SystemExit(code)), store="s", doing="walking it", name="verify")
    assert caught.value.code == code


def test_a_keyboard_interrupt_in_the_child_alone_interrupts_the_parent() -> None:
    """A SIGINT to the child alone: the command was interrupted (exit 130 at the entry),
    not a bug's exit 1."""
    with pytest.raises(KeyboardInterrupt):
        in_child(_raise(KeyboardInterrupt()), store="s", doing="walking it", name="verify")
