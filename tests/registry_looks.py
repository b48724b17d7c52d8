"""The look a registry test's child script makes at a store while a close of it is under
way on another thread (registry100's and registry102's tests).

:data:`LOOK` is script text, pasted between a script's set-up and its main part: it
reads the script's ``look`` (``is_open_here``, ``compact``, ``reserve``, ``open readonly``
or ``open``), ``path``, ``head`` (the store's ``r`` head) and ``go`` (an Event the close
waits on), and defines ``run_look()`` (the look on this thread, its answer appended to
``answer``: what it returned, or the ``StoreError``'s class and ``what``) and ``waited``
(the qualified names of the registry waits the look called: each lets the close go on).
"""

from __future__ import annotations

LOOK = r"""
import sys
import cpstore
from cpstore.errors import StoreError
from cpstore.store import lmdb_registry
from cpstore.store.maintenance import compact_store


def in_look_thread(frame, event, arg):
    # The look waits in the registry for the close under way: let the close go on.
    caller = frame.f_back
    if (
        event == "call"
        and frame.f_code.co_name == "wait"
        and caller is not None
        and "/cpstore/store/" in caller.f_code.co_filename
    ):
        waited.append(frame.f_code.co_qualname)
        go.set()
    return None


answer, waited = [], []


def run_look():
    sys.settrace(in_look_thread)
    try:
        if look == "is_open_here":
            answer.append(lmdb_registry.is_open_here(path))
        elif look == "compact":
            compact_store(path)
            answer.append("compacted")
        elif look == "reserve":
            with lmdb_registry.reserved_for_compact(path):
                answer.append("reserved")
        elif look in ("open readonly", "open"):
            with cpstore.open(path, readonly=look == "open readonly") as st:
                answer.append(f"opened {st.ref('r') == head}")
        else:
            raise SystemExit(f"no look {look}")
    except StoreError as exc:
        answer.append(f"{type(exc).__name__}: {exc.what}")
    finally:
        sys.settrace(None)


"""
