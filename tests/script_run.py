"""Run a test's Python script in a fresh interpreter and check it finished.

Tests of what would kill the process (a segfault in liblmdb, a lost thread) run their
work in a child: ``-X faulthandler`` prints every thread's stack if it dies, and the
script prints ``done`` as its last act, so an exit code of 0 alone (a script that
returned early) does not pass.
"""

from __future__ import annotations

import subprocess
import sys

#: The line a script prints (flushed) as its last act.
DONE = "done"


def run_to_done(script: str, *args: str, timeout: float = 600.0) -> None:
    """Run ``python -c script args``; fail with its exit code and stderr's tail unless it
    exited 0 having printed exactly :data:`DONE`."""
    done = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert done.returncode == 0 and done.stdout.strip() == DONE, (
        done.returncode,
        done.stderr[-4000:],
    )


def run_script(script: str, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    """Run ``python -c script args``, its output captured as text; how it ended, unchecked
    (``subprocess.TimeoutExpired`` past ``timeout``)."""
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def script_output(script: str, *args: str, timeout: float = 120.0) -> str:
    """Run ``python -c script args``; fail with its stderr unless it exited 0; its stdout."""
    done = run_script(script, *args, timeout=timeout)
    assert done.returncode == 0, (done.returncode, done.stderr[-4000:])
    return done.stdout


def run_scripts_together(
    runs: list[tuple[str, ...]], timeout: float = 120.0
) -> list[tuple[int, str, str]]:
    """Start every ``(script, *args)`` of ``runs`` at once (``python -X faulthandler -c``),
    then wait for each in turn, at most ``timeout`` s: (exit code, stdout, stderr's tail)
    of each, in order. One still running then is killed and the call fails: "hung"."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-X", "faulthandler", "-c", *run],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for run in runs
    ]
    outs: list[tuple[int, str, str]] = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=timeout)
            outs.append((proc.returncode, out, err[-3000:]))
    except subprocess.TimeoutExpired:
        pass
    finally:
        for proc in procs:
            if proc.poll() is None:  # hung: killed, the call fails below
                proc.kill()
                proc.communicate()
    assert len(outs) == len(runs), f"a process hung ({len(outs)} of {len(runs)} ended)"
    return outs
