"""Nothing a checkpoint reader hands out, or a replay object built from it, touches the map later.

py-lmdb's buffers point straight into the LMDB map, and CPython cannot revoke a
memoryview's slices or casts. Once a read block ends and another write grows
the map, a view still pointing into it reads unmapped memory: SIGSEGV. So the
public accessors hand out owned copies, and the cursor (which reads the map
zero-copy) raises "the checkpoint reader is closed" after its block. The
crash scenarios run in a child process so that a regression kills only the
child; the test asserts on its exit code and stderr.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from cpstore.errors import InvalidInputError
from cpstore.replay.cursor import ReplayCursor
from cpstore.replay.session import ReplaySession
from cpstore.store.facade import Store
from cpstore.store.facade import open as open_store

N_TOKENS = 5000

_GROW = (
    "import os, sys, cpstore\n"
    "with cpstore.open(sys.argv[1], map_size=1 << 20) as s:\n"
    "    for _ in range(40): s.put_object(os.urandom(4 << 20))\n"
)

#: Child: record, read inside a block, leave it, grow the map by ~160 MB
#: (a 1 MiB initial map is remapped elsewhere), then use what the block made.
#: In the "-other" scenarios another process grows it, and a new read
#: adopts the new size (which remaps it here).
_CHILD = f"GROW = {_GROW!r}\n" + textwrap.dedent(
    """
    import os, subprocess, sys
    import cpstore
    from cpstore import InvalidInputError, ReplaySession
    from cpstore.replay import ReplayCursor

    path, scenario, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = cpstore.open(path, map_size=1 << 20)
    rec = store.recorder("r")
    rec.observe(1, "clock", b"t", pinned_at=1.0)
    rec.tokens([("rng", i) for i in range(n)])
    cid = rec.checkpoint(1, {"x": 1})
    with store.read(cid) as cp:
        cursor = ReplayCursor.from_checkpoint(cp)
        session = ReplaySession(cp)
        assert cursor.resolve("rng") == 0 and session.cursor.resolve("rng") == 0
        tokens = cp.tokens()
        values, offsets = cp.token_values()
        held = [tokens, tokens[32:4096], tokens.cast("Q"), memoryview(tokens)[64:].cast("Q"),
                values, values[1:], offsets.cast("Q"), offsets[8:800]]
        inside = [bytes(v) for v in held]
    if scenario.endswith("-other"):
        subprocess.run([sys.executable, "-c", GROW, path], check=True)
        with store.read(cid):
            pass
        scenario = scenario.removesuffix("-other")
    else:
        for _ in range(40):
            store.put_object(os.urandom(4 << 20))
    if scenario == "views":
        after = [bytes(v) for v in reversed(held)][::-1]  # derived views first
        print("SAME" if after == inside else "DIFFERENT")
        sys.exit(0)
    target = cursor if scenario == "cursor" else session.cursor
    try:
        target.resolve("rng")
    except InvalidInputError as exc:
        print("CLOSED" if "the checkpoint reader is closed" in str(exc) else f"OTHER {exc}")
        sys.exit(0)
    print("RESOLVED")
    """
)


def _child(tmp_path: Path, scenario: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path / "s"), scenario, str(N_TOKENS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with open_store(tmp_path / "s") as st:
        yield st


def _recorded(store: Store, n: int = N_TOKENS) -> str:
    rec = store.recorder("r")
    rec.observe(1, "clock", b"t", pinned_at=1.0)
    rec.observe(2, "clock", b"u", pinned_at=2.0)
    rec.tokens([("rng", i) for i in range(n)])
    rec.effect("db", b"row")
    return rec.checkpoint(1, {"x": 1}, seal_ledger=True)


class TestAfterTheMapGrows:
    @pytest.mark.parametrize("scenario", ["cursor", "session", "cursor-other"])
    def test_a_cursor_used_after_its_block_raises_instead_of_crashing(
        self, tmp_path: Path, scenario: str
    ) -> None:
        """resolve() after the block and a map growth raises 'reader is closed' (was SIGSEGV)."""
        out = _child(tmp_path, scenario)
        assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
        assert out.stdout.strip() == "CLOSED", out.stdout
        assert out.stderr == ""

    @pytest.mark.parametrize("scenario", ["views", "views-other"])
    def test_handed_out_views_their_slices_and_casts_stay_valid(
        self, tmp_path: Path, scenario: str
    ) -> None:
        """tokens()/token_values() and views sliced or cast from them read the same bytes later."""
        out = _child(tmp_path, scenario)
        assert out.returncode == 0, (out.returncode, out.stderr[-2000:])
        assert out.stdout.strip() == "SAME", out.stdout
        assert out.stderr == ""


class TestCursorAfterTheBlock:
    def test_resolve_after_the_block_raises_reader_closed(self, store: Store) -> None:
        """The next resolve() after the block raises, even within a block of decoded values."""
        cid = _recorded(store)
        with store.read(cid) as cp:
            cursor = ReplayCursor.from_checkpoint(cp)
            assert [cursor.resolve("rng") for _ in range(3)] == [0, 1, 2]
        with pytest.raises(InvalidInputError, match="the checkpoint reader is closed") as info:
            cursor.resolve("rng")
        assert info.value.where == cid
        assert cursor.position == 3

    def test_a_cursor_made_before_the_block_ends_but_never_used_raises(self, store: Store) -> None:
        """A cursor that resolved nothing inside the block raises on its first resolve()."""
        cid = _recorded(store)
        with store.read(cid) as cp:
            cursor = ReplayCursor.from_checkpoint(cp)
        with pytest.raises(InvalidInputError, match="the checkpoint reader is closed"):
            cursor.resolve("rng")

    def test_a_cursor_cannot_be_made_from_a_closed_reader(self, store: Store) -> None:
        """from_checkpoint on a reader whose block ended raises instead of reading the map."""
        cid = _recorded(store)
        with store.read(cid) as cp:
            pass
        with pytest.raises(InvalidInputError, match="the checkpoint reader is closed"):
            ReplayCursor.from_checkpoint(cp)

    def test_what_the_replay_resolved_stays_usable_after_the_block(self, store: Store) -> None:
        """replayed(), the guard and finish() hold copies: they work after the block."""
        cid = _recorded(store)
        with store.read(cid) as cp:
            session = ReplaySession(cp)
            assert session.observations.read(1, "clock") == b"t"
            values = [session.cursor.resolve("rng") for _ in range(N_TOKENS)]
            state_digest = cp.manifest.state_digest
            inside = bytes(cp.tokens())
        assert values == list(range(N_TOKENS))
        session.guard.check("db", b"row")
        run = session.finish(state_digest)
        assert bytes(run.tokens.view()) == inside
        with pytest.raises(InvalidInputError, match="the checkpoint reader is closed"):
            session.observations.read(2, "clock")


class TestHandedOutBuffers:
    def test_tokens_and_token_values_are_owned_copies(self, store: Store) -> None:
        """The views handed out wrap bytes the reader owns, not the LMDB map."""
        cid = _recorded(store, 100)
        with store.read(cid) as cp:
            tokens = cp.tokens()
            values, offsets = cp.token_values()
            for view in (tokens, values, offsets):
                assert isinstance(view, memoryview) and isinstance(view.obj, bytes)
            assert cp.tokens() is tokens  # copied once per reader
            assert len(tokens) == 32 * 100 and len(offsets) == 8 * 101
        assert tokens.cast("Q")[4] == 1  # seq of token 1, read after the block
