"""What a fork() child's reads raised, told to its parent through a pipe: source the
scripts of the fork-child tests (run with ``python -c``) begin with."""

from __future__ import annotations

#: Defines ``tell_each(w, reads)``: in the child, tries each ``(name, read)`` of ``reads``
#: in turn, writes ``name read`` or ``name <its exception's class>``, a line each, to the
#: pipe's end ``w``, and ends the child (``os._exit(0)``).
TELL_EACH = r"""
import os


def tell_each(w, reads):
    said = []
    for name, read in reads:
        try:
            read()
            said.append(f"{name} read")
        except Exception as exc:
            said.append(f"{name} {type(exc).__name__}")
    os.write(w, "\n".join(said).encode())
    os._exit(0)
"""
