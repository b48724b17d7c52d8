"""The chaos workers' logs (tests/chaos_worker.py, tests/chaos_roles.py): one append-only
JSON-lines file a worker, and how a loop of the mix logs what it caught.

Every line of a log (``w<N>.log``, append-only across restarts) is JSON
with ``t`` (``time.monotonic_ns()``, one clock for every process on Linux):
``b`` before an operation, then ``a`` (acknowledged, with what the store
returned) or ``x`` (the error's class). An ``a`` line is fsynced after the
store returned; a ``b`` line of a destructive operation is fsynced before it
starts, so a deletion the store saw is always in the log. Anything raised
that is not a CpstoreError is logged as ``defect`` with its traceback.
"""

from __future__ import annotations

import json
import os
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from cpstore.errors import CpstoreError, IntegrityError

LOGGED = "chaos: logged"


def note_error(log: Log, exc: CpstoreError, where: str) -> None:
    """A CpstoreError a loop of the mix caught: an IntegrityError not logged yet (raised
    outside ``chaos_worker.Worker.call``) is a defect (nothing here damages the store but the
    operator, whose damaged ref the checker allows); any other not logged yet is logged
    as ``err`` (before, only one that ended a whole session was: a read outside a call
    that raised, e.g., a connection error with no server restart went unseen), which
    tests/chaos_errors.py judges; an operation's was logged by its call."""
    if LOGGED in getattr(exc, "__notes__", ()):
        return
    if isinstance(exc, IntegrityError):
        log.write("defect", sync=True, op=where, err="IntegrityError",
                  tb="".join(traceback.format_exception(exc))[-2000:])  # fmt: skip
    else:  # judged by tests/chaos_errors.py's table like a logged call's refusal
        log.write("err", sync=True, op=where, err=type(exc).__name__, msg=str(exc)[:300],
                  tb="".join(traceback.format_exception(exc))[-1500:])  # fmt: skip
    exc.add_note(LOGGED)


def log_escape(log: Log, exc: BaseException, where: str) -> None:
    """A non-CpstoreError that reached a loop of the mix: a defect, logged before the
    thread or process ends (else only a missing ``end`` or a traceback on stderr said so)."""
    log.write("defect", sync=True, op=where, err=type(exc).__name__,
              tb="".join(traceback.format_exception(exc))[-2000:])  # fmt: skip


class Log:
    """An append-only JSON-lines log; ``fsync`` after acknowledgements and destructive intents."""

    def __init__(self, path: str, worker: int, inc: int) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        self._base = {"w": worker, "inc": inc}
        self._op = 0

    def op(self) -> str:
        """A fresh operation id, unique in this log."""
        with self._lock:
            self._op += 1
            return f"{self._base['w']}.{self._base['inc']}.{self._op}"

    def write(self, ev: str, *, sync: bool, **fields: Any) -> None:
        """Append one line (and fsync it when ``sync``)."""
        with self._lock:
            line = {"t": time.monotonic_ns(), "ev": ev, **self._base, **fields}
            os.write(self._fd, (json.dumps(line, sort_keys=True) + "\n").encode())
            if sync:
                os.fsync(self._fd)


def ready(logdir: Path, w: int) -> bool:
    """True when worker ``w``'s first incarnation is ready (imports done)."""
    path = logdir / f"w{w}.log"
    return path.exists() and '"ready"' in path.read_text()


def started(logdir: Path, w: int, inc: int) -> bool:
    """True when incarnation ``inc`` of worker ``w`` began an operation (the compactor: a
    compaction)."""
    path = logdir / f"w{w}.log"
    if not path.exists():
        return False
    for raw in path.read_text().split("\n")[:-1]:
        r = json.loads(raw)
        if r["inc"] == inc and r["ev"] == "b" and r["op"] != "open":
            return True
    return False
