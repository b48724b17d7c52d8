"""Run a command's work on a store in a forked child, so damage that kills liblmdb is told.

LMDB 0.9 has no page checksums: walking some damaged B-tree pages makes it abort
(an assertion) or fault, which no Python code can catch. ``verify``, ``audit
--check``, ``compact`` and ``copy`` walk every page, so they do it in a child
(nothing of the store is open yet in this process): the child relays what it
has to say over a pipe, then its result or its :class:`~cpstore.errors.CpstoreError`
or :class:`OSError` (raised here, so the command's exit codes are as in process);
one that would not survive the pipe is sent as the parent can rebuild it
(_portable); a child killed by such a signal means damaged pages, an :class:`IntegrityError`
(exit 5) naming the phase it died in; a child that ended any other way without a
result is a :class:`StoreError`, one that failed with any other exception (a bug) a
:class:`RuntimeError` carrying its traceback (exit 1, as in process); a ``sys.exit()`` or
a KeyboardInterrupt in the child's work is raised again in the parent, as in process. A command run
where ``fork()`` is missing, or whose store this process already has open, does its
work here, unprotected.

The child never outlives the command: SIGTERM or SIGHUP to the parent (``timeout``, a
closed terminal, a supervisor stopping it) is :class:`Terminated` in the parent while it
waits, which kills the child and lets the command clean up as after Ctrl-C (a signal
ignored when the command started, as under ``nohup``, stays ignored); on Linux the child
is also killed when the parent dies of SIGKILL. Before, the parent died at once and the
child went on alone: a ``copy`` told nothing and wrote DEST after the command ended, a
``compact`` kept the store's locks.

:func:`reads_in_child` runs a whole command so (``stats``, ``log``; bus97; ``inspect``/
``show``, ``diff``, ``push``, ``pull``, damage98): a damaged leaf whose value's length runs
past the end of ``data.mdb`` (LMDB checks no node size) is read past the file inside the
map, and the process died of SIGBUS with no word; now that is exit 5 naming the store.
Their output is held in the child and printed by the parent once the command's work is
done.
An MDB_BAD_TXN of a store a command opened read-only is already damage as the store
words it (``lmdb_errors.translate(..., readonly=True)``).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import io
import os
import pickle
import signal
import sys
import tempfile
import threading
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import IO, Any, TypeVar

from cpstore.cli.exit_codes import EXIT_INTERNAL
from cpstore.errors import CpstoreError, IntegrityError, StoreError
from cpstore.store.lmdb_registry import is_open_here
from cpstore.store.location import is_store_url, redact

__all__ = ["Send", "Terminated", "can_fork_for", "in_child", "reads_in_child"]

T = TypeVar("T")
#: How the child's work says something to the parent: ``send(kind, value)``;
#: kind ``"phase"`` (a str) and ``"progress"`` (done, total) also name where it died.
Send = Callable[[str, Any], None]

#: Signals by which liblmdb dies on a damaged page (assertions, wild pointers).
_DAMAGE_SIGNALS = frozenset(
    getattr(signal, name) for name in ("SIGABRT", "SIGSEGV", "SIGBUS", "SIGFPE", "SIGILL")
)
_RESULT, _ERROR, _EXIT, _INTERRUPT = "\x00result", "\x00error", "\x00exit", "\x00interrupt"
#: Signals that end a command from outside (``timeout``, ``kill``, a closed terminal).
_ENDING_SIGNALS = (signal.SIGTERM, signal.SIGHUP)
#: Linux's prctl option: the signal a process gets when its parent dies.
_PR_SET_PDEATHSIG = 1
#: What a push or pull whose child died left in the receiver (reads_in_child).
_LANDED = (
    "the branches it landed before stay in the receiver, each whole (every ref names what "
    "it reaches), the others did not land"
)


class Terminated(BaseException):
    """SIGTERM or SIGHUP ended the command while a child did its work (the child killed)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    @property
    def name(self) -> str:
        """The signal's name (``SIGTERM``)."""
        return signal.Signals(self.signum).name


@contextlib.contextmanager
def _ending_raises() -> Iterator[list[int]]:
    """While in the block, an ending signal whose handler is the default raises
    :class:`Terminated` (main thread only; one ignored stays ignored). Yields the signals
    it took over, which the child gives back to the default at once."""
    taken: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield taken
        return

    def ended(signum: int, _frame: Any) -> None:
        raise Terminated(signum)

    try:
        for signum in _ENDING_SIGNALS:
            if signal.getsignal(signum) == signal.SIG_DFL:
                # Noted first: a signal landing on the install's return left the handler
                # installed and unnoted, so never given back (review97).
                taken.append(signum)
                signal.signal(signum, ended)
        yield taken
    finally:
        # Each given back even when a Terminated lands in the loop (signal.signal runs the
        # handlers of signals already pending before it changes one): one raised there left
        # the rest raising Terminated in the caller's code after the command (review97).
        # That Terminated is raised once all are back: the signal is not lost.
        late: BaseException | None = None
        while taken:
            try:
                signal.signal(taken[-1], signal.SIG_DFL)
                taken.pop()
            except Terminated as exc:
                late = exc
        if late is not None:
            raise late


def _die_with_parent(parent: int) -> None:
    """In the child: be killed when the parent dies (Linux), even of SIGKILL."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the prctl: nobody waits
        os._exit(EXIT_INTERNAL)


def can_fork_for(path: str | None) -> bool:
    """Whether a command's work on the store at ``path`` can run in a child."""
    return hasattr(os, "fork") and not is_open_here(path or "")


def in_child(
    work: Callable[[Send], T],
    *,
    store: str,
    doing: str,
    name: str,
    heard: Callable[[str, Any], None] | None = None,
    died: str = "",
) -> T:
    """``work(send)``'s result, run in a forked child; ``heard(kind, value)`` gets what
    it sends. ``store`` (where), ``doing`` ("walking it") and ``name`` ("verify") word
    the errors of a child that died; ``died``, when given, is added to their message
    (what such a death left, as "; <died>")."""
    sys.stdout.flush()
    sys.stderr.flush()
    parent = os.getpid()
    with tempfile.TemporaryFile() as err, _ending_raises() as taken:
        read_end, write_end = os.pipe()
        # Held back across the fork: one landing between the fork and the child's reset
        # (or the parent's try that kills the child) would run the command's code in the
        # child, or leave it alone. Each side lets them in where it is ready for them.
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, [*taken, signal.SIGINT])
        try:
            pid = os.fork()
        except BaseException:
            # A failed fork (EAGAIN, ENOMEM) left them blocked in this thread for good:
            # Ctrl-C, SIGTERM and SIGHUP never reached it again (review97).
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
            os.close(read_end)
            os.close(write_end)
            raise
        if pid == 0:  # pragma: no cover - runs in the child, which never returns
            for signum in taken:  # the child ends by them as any process does
                signal.signal(signum, signal.SIG_DFL)
            os.close(read_end)
            _child(work, write_end, err.fileno(), parent=parent, mask=mask)
        os.close(write_end)
        try:
            result: T = _parent(
                pid,
                read_end,
                err,
                store=store,
                doing=doing,
                name=name,
                heard=heard,
                mask=mask,
                died=died,
            )
            return result
        finally:
            os.close(read_end)


def reads_in_child(
    handler: Callable[[argparse.Namespace], int],
    *,
    doing: str,
    store: str = "store",
    beside: str = "",
) -> Callable[[argparse.Namespace], int]:
    """``handler`` (a command reading the LMDB store ``args.<store>`` names, read-only) run
    whole in a child by :func:`in_child` when it can fork for it: what it prints is held
    there and printed here with its exit code; a child that died of SIGBUS (a value read
    past the end of the data file), SIGSEGV or an abort is :class:`IntegrityError`, exit
    5. A URL, or a store this process has open, is read here as before; so is the whole
    command when ``args.<beside>`` (the store a push or pull writes) is a folder this
    process has open. A ``push``/``pull`` whose child dies leaves the receiver as a killed
    transfer does: every landed ref names what it reaches, and running it again resumes.
    Its child reads the receiver too: a death names both stores and says so (review99: a
    receiver's damaged record was told "reading the source" at the sound source)."""

    def run(args: argparse.Namespace) -> int:
        path = getattr(args, store, None)
        other = getattr(args, beside, None) if beside else None
        if not path or is_store_url(path) or not can_fork_for(path):
            return handler(args)
        if other and not is_store_url(other) and not can_fork_for(other):
            return handler(args)

        def work(send: Send) -> tuple[int, str, str]:
            send("phase", "under way")  # not "starting": a push may have landed branches
            out, err = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                code = handler(args)
            return code, out.getvalue(), err.getvalue()

        where, what, died = path, doing, ""
        if other:
            where = f"{path} (the source) or {redact(other)} (the receiver)"
            what, died = f"{doing} or the receiver", _LANDED
        code, out, err = in_child(work, store=where, doing=what, name=args.command, died=died)
        sys.stderr.write(err)
        sys.stdout.write(out)
        return code

    return run


def _child(
    work: Callable[[Send], Any], out_fd: int, err_fd: int, *, parent: int, mask: Iterable[int]
) -> None:
    """The child half of :func:`in_child`: every result goes down ``out_fd``."""
    code = 0
    try:
        _die_with_parent(parent)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        os.dup2(err_fd, 2)  # liblmdb's assertion text, for the parent's one line
        with os.fdopen(out_fd, "wb") as out:

            def send(kind: str, value: Any) -> None:
                pickle.dump((kind, value), out)
                out.flush()

            try:
                result = work(send)
            except (CpstoreError, OSError) as exc:  # the command's own errors, told as here
                send(_ERROR, _portable(exc))
            except SystemExit as exc:  # sys.exit() in the work: the parent exits so too
                status = exc.code
                send(_EXIT, status if status is None or isinstance(status, int) else str(status))
            except KeyboardInterrupt:  # SIGINT to the child alone: the command was interrupted
                send(_INTERRUPT, None)
            else:
                send(_RESULT, result)
    except BaseException:
        traceback.print_exc()
        code = EXIT_INTERNAL
    finally:
        os._exit(code)


def _survives(exc: BaseException) -> bool:
    """Whether the parent can unpickle ``exc`` as it was pickled here."""
    try:
        pickle.loads(pickle.dumps(exc))
    except Exception:
        return False
    return True


def _portable(exc: CpstoreError | OSError) -> BaseException:
    """``exc`` as the parent can rebuild it (audit39): itself; else the same class with
    ``expected``/``got`` as text (a memoryview failed the child's send: exit 1, "a bug"),
    or the plain OSError of its errno (a subclass whose constructor takes other arguments
    failed the parent's load: "ended without a result", exit 7). A memoryview goes as its
    bytes: its message shows them as in process, not ``<memory at 0x...>`` (audit41)."""
    if _survives(exc):
        return exc
    if isinstance(exc, CpstoreError):
        text = [_text(v) for v in (exc.expected, exc.got)]
        other = type(exc)(exc.what, where=exc.where, expected=text[0], got=text[1])
        if _survives(other):
            return other
    elif exc.errno is not None:
        return OSError(exc.errno, exc.strerror, exc.filename)
    return OSError(str(exc))


def _text(value: Any) -> Any:
    """``value`` for :func:`_portable`'s twin: None, bytes of a memoryview, else its text."""
    if value is None:
        return None
    return bytes(value) if isinstance(value, memoryview) else str(value)


def _parent(
    pid: int,
    read_end: int,
    err: IO[bytes],
    *,
    store: str,
    doing: str,
    name: str,
    heard: Callable[[str, Any], None] | None,
    mask: Iterable[int],
    died: str = "",
) -> Any:
    """The parent half of :func:`in_child`: relay what the child says, then its result."""
    phase, done, total = "starting", 0, 0
    result: tuple[str, Any] | None = None
    reaped: list[tuple[int, int]] = []
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a Terminated from here kills it
        with os.fdopen(os.dup(read_end), "rb") as inp:
            while True:
                try:
                    kind, value = pickle.load(inp)
                except Exception:  # the end, or a frame cut short by the child's death
                    break
                if kind in (_RESULT, _ERROR, _EXIT, _INTERRUPT):
                    result = (kind, value)
                    continue
                if kind == "phase":
                    phase = value
                elif kind == "progress":
                    done, total = value
                if heard is not None:
                    heard(kind, value)
        # Reaped and kept in one C call (map calls waitpid, extend stores its answer: no
        # bytecode between): a Terminated landing on a bare call's return lost the status
        # with the child reaped, and the clean-up killed a pid no longer the child's
        # (ProcessLookupError instead of "terminated", or another process given it; review97).
        reaped.extend(map(os.waitpid, (pid,), (0,)))
    finally:
        if not reaped:  # interrupted: the child must not outlive the command
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    status = reaped[0][1]
    if result is not None:
        kind, value = result
        if kind == _ERROR:
            raise value
        if kind == _EXIT:
            raise SystemExit(value)
        if kind == _INTERRUPT:
            raise KeyboardInterrupt
        return value
    err.seek(0)
    lines = err.read().decode("utf-8", "replace").strip().splitlines()
    where = f"{store} ({phase}" + (f", after {done} of {total} entries)" if total else ")")
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_INTERNAL and lines:
        # A bug in the child's work (an exception no command raises on purpose): told as
        # in process, with the child's traceback, and the command's exit 1.
        raise RuntimeError(f"the {name} process failed: {store}\n" + "\n".join(lines))
    if os.WIFSIGNALED(status) and os.WTERMSIG(status) in _DAMAGE_SIGNALS:
        raise IntegrityError(
            "the data file is damaged: liblmdb died with "
            f"{signal.Signals(os.WTERMSIG(status)).name} {doing}" + (f"; {died}" if died else ""),
            where=where,
            got=lines[-1] if lines else None,
        )
    raise StoreError(
        f"the {name} process ended without a result" + (f"; {died}" if died else ""),
        where=where,
        got=lines[-1] if lines else f"wait status {status}",
    )
