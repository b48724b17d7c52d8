"""left93: a close interrupted (a signal handler's exception) at its very first points,
then closed again by its caller.

In the opening process every such landing (``Store.close``'s start, the backend close's
start, ``os.getpid()``'s return, ``Reentry.refuse``'s start, the ``done`` lock's making and
taking) comes before anything of the close ran, ``_closed`` still clear: the caller's
retry closes the store (tests/test_review89_close_release.py sweeps them with the rest).

A fork() child's close of an LMDB store it inherited set ``_closed`` before dropping its
handle (``release_env``): a landing at ``release_env``'s start, or on the registry lock's
taking, left the parent's environment registered here with the child's handle, and the
retry returned at once: every later ``cpstore.open`` of that store in the child raised
ForkError for the child's life, where a closed handle lets the child open the store
itself. And a landing after the handle's drop, before the environment was forgotten, left
it registered with no handle, which the next open never forgot in a child.
"""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import pytest
from pg_cluster import backend_url  # noqa: F401 - fixture
from test_begin_interrupted import fds_in, interrupted_at

import cpstore
from cpstore.store import lmdb_registry
from cpstore.store.lmdb_backend import Durability

#: The frames swept: the close's own and the registry's steps it runs in a child.
_FRAMES = frozenset(
    {"Store.close", "LmdbBackend.close", "release_env", "_unregister", "Reentry.refuse"}
)


def _in_child(path: Path, k: int, durability: Durability) -> tuple[list[str], str]:
    """A store of ``path`` opened here, then in a fork() child: its close interrupted at
    the k-th landing, closed again, and the store opened by the child itself; (where it
    landed, what that open did)."""
    st = cpstore.open(path, durability=durability)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        said = [["?"], "?"]
        try:
            landed = interrupted_at(k, _FRAMES, st.close, qualified=True)
            st.close()  # the caller's retry
            gc.collect()
            try:
                with cpstore.open(path) as own:
                    own.history("r")
                opened = "opened"
            except Exception as exc:
                opened = type(exc).__name__
            said = [landed, opened]
        except BaseException as exc:
            said = [["?"], repr(exc)]
        finally:
            os.write(w, json.dumps(said).encode())
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as got:
        said = json.loads(got.read())
    os.waitpid(pid, 0)
    st.close()
    return said[0], said[1]


@pytest.mark.parametrize("durability", ["sync", "batched"])
def test_a_fork_childs_close_interrupted_then_closed_again_lets_it_open_the_store(
    tmp_path: Path, durability: Durability
) -> None:
    path = tmp_path / "s"
    with cpstore.open(path) as st:
        st.recorder("r").checkpoint(0, {"a": 1})
    wrong: list[str] = []
    k = 0
    while True:
        k += 1
        landed, opened = _in_child(path, k, durability)
        if landed and opened != "opened":
            wrong.append(f"{landed[0]}: {opened}")
        if not landed:
            assert opened == "opened"  # ran through: the child opens the store itself
            break
    assert wrong == []
    assert k > 4


#: The frames of a close's first points, by qualified name: everything of them runs before
#: the close claims the store.
_EARLY = frozenset({"Store.close", "Reentry.refuse"})


@pytest.mark.parametrize("durability", ["sync", "batched"])
def test_a_close_interrupted_before_its_claim_ran_nothing_and_the_retry_closes(
    url: str, durability: Durability
) -> None:
    """Each landing in ``Store.close`` and ``Reentry.refuse``, and the backend close's up to
    its claim (its start, ``os.getpid()``'s return, the ``done`` lock's making and taking,
    ``get_ident``'s return): ``_closed`` still clear, the store open here (its queued
    checkpoint still queued), and the caller's retry closes it."""
    lmdb = "://" not in url
    own = {"LmdbBackend.close" if lmdb else "PgBackend.close"}
    wrong: list[str] = []
    early = 0
    k = 0
    while True:
        k += 1
        st = cpstore.open(url, durability=durability)
        st.recorder(f"r{k}").checkpoint(0, {"k": k})
        backend = st.backend
        landed = interrupted_at(k, _EARLY | own, st.close, qualified=True)
        if not landed:
            break
        if backend._closer is not None or backend.closed:  # past the claim: review89's
            st.close()
            continue
        early += 1
        if lmdb and not lmdb_registry.is_open_here(url):
            wrong.append(f"{landed[0]}: released")
        if durability == "batched" and backend.pending != 1:
            wrong.append(f"{landed[0]}: {backend.pending} queued")
        st.close()  # the caller's retry
        if not backend.closed or (lmdb and (lmdb_registry.is_open_here(url) or fds_in(Path(url)))):
            wrong.append(f"{landed[0]}: left open")
        if not lmdb and not backend._pool.closed:
            wrong.append(f"{landed[0]}: pool open")
    assert wrong == []
    assert early >= 6
