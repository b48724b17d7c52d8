"""Audit 48: a fork() child closing a PostgreSQL store handle its parent was closing.

audit41 made LMDB's close return in a fork() child that inherited another thread's close
claim (``_closer``: the Event no thread of the child will set). PostgreSQL's close took the
same claim and waited on it in the child too: the child hung for ever in its close (a
``with`` block's end, a cleanup). Now a child's close never waits for its parent's and
closes nothing of the parent's (the pool's connections are the parent's) (fails before).
"""

from __future__ import annotations

import sys

import pytest
from pg_cluster import pg_cluster, pg_url  # noqa: F401 - fixtures
from script_run import script_output
from test_audit41_fork_child_close import SCRIPT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork")


def test_a_fork_child_closing_a_pg_handle_its_parent_is_closing_returns(pg_url: str) -> None:
    stdout = script_output(SCRIPT, pg_url, "flush", timeout=180)
    assert stdout.split() == ["child", "0", "parent", "closed", "True"], stdout
