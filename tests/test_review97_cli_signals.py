"""review97: the CLI's worker child (cpstore.cli.child.in_child) leaves the calling
process's signal mask and handlers as it found them: after a failed fork() (the mask
blocked across it was left blocked: Ctrl-C, SIGTERM and SIGHUP never reached that thread
again), and when a signal lands while the handlers are given back (one raised there left
the rest installed, raising Terminated in the caller's code after the command).

Each case runs in its own interpreter (a failure would leave pytest's own mask blocked)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": _ROOT}
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


_FORK_FAILS = """
import errno, os, signal, threading
from cpstore.cli import child

def no_fork():
    raise OSError(errno.EAGAIN, "Resource temporarily unavailable")

os.fork = no_fork
out = []

def attempt():
    try:
        child.in_child(lambda send: 1, store="s", doing="walking it", name="verify")
    except OSError as exc:
        assert exc.errno == errno.EAGAIN
    else:
        raise SystemExit("the fork did not fail")
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    out.append(sorted(int(s) for s in blocked))
    out.append(signal.getsignal(signal.SIGTERM) == signal.SIG_DFL)

if {threaded}:
    t = threading.Thread(target=attempt)
    t.start()
    t.join()
else:
    attempt()
print(out)
"""


@pytest.mark.parametrize("threaded", [False, True])
def test_failed_fork_leaves_no_signal_blocked(threaded: bool) -> None:
    assert _run(_FORK_FAILS.format(threaded=threaded)) == "[[], True]"


_LANDS_IN_RESTORE = """
import os, signal
from cpstore.cli import child

real, me, fired = signal.signal, os.getpid(), []

def landing(signum, handler):
    # The other ending signal arrives just as the command gives the first handler back.
    if os.getpid() == me and handler == signal.SIG_DFL and not fired:
        other = signal.SIGHUP if signum == signal.SIGTERM else signal.SIGTERM
        fired.append(signal.Signals(other).name)
        os.kill(me, other)
    return real(signum, handler)

signal.signal = landing
try:
    child.in_child(lambda send: 1, store="s", doing="walking it", name="verify")
except child.Terminated as exc:
    told = exc.name
else:
    told = None
signal.signal = real
print([told == fired[0], len(fired), signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
       signal.getsignal(signal.SIGHUP) == signal.SIG_DFL])
"""


def test_signal_landing_in_the_restore_leaves_no_handler() -> None:
    # The SIGHUP is told (Terminated), and neither handler outlives the command.
    assert _run(_LANDS_IN_RESTORE) == "[True, 1, True, True]"


_TWICE = """
import os, signal
from cpstore.cli import child

for _ in range(2):
    assert child.in_child(lambda send: os.getpid(), store="s", doing="d", name="n") != os.getpid()
print([signal.getsignal(signal.SIGTERM) == signal.SIG_DFL,
       signal.getsignal(signal.SIGHUP) == signal.SIG_DFL,
       sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, []))])
"""


def test_two_commands_leave_handlers_and_mask_as_found() -> None:
    assert _run(_TWICE) == "[True, True, []]"


_LANDS_AFTER_REAP = """
import signal, sys
from cpstore.cli import child

fired = []

def profile(frame, event, arg):
    # SIGTERM's handler runs at the first point after the child was reaped where one can.
    if (
        event == "c_return"
        and frame.f_code.co_name == "_parent"
        and getattr(arg, "__name__", "") in ("waitpid", "extend")
        and not fired
    ):
        fired.append(arg.__name__)
        signal.raise_signal(signal.SIGTERM)

sys.setprofile(profile)
try:
    child.in_child(lambda send: 1, store="s", doing="walking it", name="verify")
except child.Terminated as exc:
    told = exc.name
except OSError as exc:
    told = type(exc).__name__
sys.setprofile(None)
print([told, len(fired)])
"""


def test_signal_landing_after_the_reap_kills_no_reaped_pid() -> None:
    # Before: the status was lost with the child reaped, so the clean-up killed a pid no
    # longer the child's (ProcessLookupError, or another process given that pid) and the
    # command failed with that error instead of "terminated (SIGTERM)".
    assert _run(_LANDS_AFTER_REAP) == "['SIGTERM', 1]"
