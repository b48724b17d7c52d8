"""audit45: an interrupt at any step of a continued tree's build or stash (append_state.py),
or a failure after it in the same checkpoint, leaves the recorder able to go on: every
checkpoint it acknowledges reads back equal and verifies.

audit40 pinned two points (pack_root's refusal, an interrupt between the build and its
stash). This covers the others: the chunk cuts and the batch digest of a build, a node's
packing and digest, the whole-part digest, the list walk of a plain-list part, each
frame stashed (a first, third or ninth call: midway through a stash whose last root is
already set), a second continued part's build after the first part's succeeded, and
after the state (the manifest's encoding, the commit) — sync and batched. Passes as
merged except at ``frame_chunk`` for an AppendLog part: the interrupt (one instance
raised, so its traceback lives on) kept a slice of the log's buffer alive and the next
append raised BufferError (tests/test_audit45_append_log_kept_error.py; 6 failed here
before that fix). A guard for the next change to the shortcut ("the previous root is
stored, so is everything settled before it").
"""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import xxhash

import cpstore
from cpstore.errors import StoreError
from cpstore.native.append_log import AppendLog
from cpstore.store import append_state
from cpstore.store import recorder as recorder_module

_RNG = random.Random(45)
#: Elements of mixed sizes around RUN_MIN (512): some end a chunk alone, some do not.
_ELEMENTS = [_RNG.randbytes(_RNG.randrange(100, 1500)) for _ in range(200)]

#: (module, attribute) interrupted: each a step of a continued build or its stash.
_STEPS: list[tuple[Any, str]] = [
    (append_state, "chunk_cuts"),
    (append_state, "digest_batch"),
    (append_state, "pack_node"),
    (append_state, "digest"),
    (xxhash, "xxh3_128"),
    (append_state, "frame_chunk"),
    (append_state, "_walk"),
    (append_state, "pack_root"),
]
#: Steps of the recorder after the state is built (same checkpoint, nothing stored).
_AFTER = ["encode_recorded_manifest", "objects_to_check", "commit_stored"]


def _raising_at(call: int, real: Callable[..., Any], exc: BaseException) -> Callable[..., Any]:
    calls = [0]

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        if calls[0] == call:
            raise exc
        return real(*args, **kwargs)

    return wrapped


def _state(kind: str, n: int, log: AppendLog, second: AppendLog) -> dict[str, Any]:
    """The part ``log`` (an AppendLog grown in place, or a new plain list) and ``second``,
    a second AppendLog part of the same elements."""
    second.extend(_ELEMENTS[len(second) : n])
    if kind == "log":
        log.extend(_ELEMENTS[len(log) : n])
        return {"log": log, "second": second}
    return {"log": list(_ELEMENTS[:n]), "second": second}


def _run(tmp_path: Path, kind: str, durability: Any, patch: Callable[[Any], None]) -> None:
    """Two checkpoints, a third under ``patch`` (it may raise), four more; then every
    acknowledged one reads back equal and the store verifies."""
    log, second = AppendLog(), AppendLog()
    acknowledged: dict[str, int] = {}
    with cpstore.open(tmp_path / "s", durability=durability) as store:
        rec = store.recorder("r")
        for step, n in enumerate((30, 60)):
            acknowledged[rec.checkpoint(step, _state(kind, n, log, second))] = n
        with pytest.MonkeyPatch.context() as m:
            patch(m)
            with contextlib.suppress(KeyboardInterrupt, MemoryError, StoreError):
                acknowledged[rec.checkpoint(2, _state(kind, 90, log, second))] = 90
        for step, n in ((3, 120), (4, 150), (5, 151), (6, 200)):
            acknowledged[rec.checkpoint(step, _state(kind, n, log, second))] = n
        rec.close()
    with cpstore.open(tmp_path / "s") as store:
        for cid, n in acknowledged.items():
            with store.read(cid) as cp:
                assert cp.state_part("log") == _ELEMENTS[:n], (cid, n)
                assert cp.state_part("second") == _ELEMENTS[:n], (cid, n)
            assert store.verify_checkpoint(cid) == (), (cid, n)
        assert store.verify().ok


@pytest.mark.parametrize("durability", ["sync", "batched"])
@pytest.mark.parametrize("call", [1, 3, 9])
@pytest.mark.parametrize("step", range(len(_STEPS)), ids=[name for _, name in _STEPS])
@pytest.mark.parametrize("kind", ["log", "list"])
def test_an_interrupt_inside_a_continued_build_or_stash(
    kind: str, step: int, call: int, durability: str, tmp_path: Path
) -> None:
    module, name = _STEPS[step]

    def patch(m: Any) -> None:
        m.setattr(module, name, _raising_at(call, getattr(module, name), KeyboardInterrupt()))

    _run(tmp_path, kind, durability, patch)


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), MemoryError(), StoreError("injected")])
@pytest.mark.parametrize("durability", ["sync", "batched"])
@pytest.mark.parametrize("at", ["second_part", *_AFTER])
@pytest.mark.parametrize("kind", ["log", "list"])
def test_a_failure_after_a_continued_build_in_the_same_checkpoint(
    kind: str, at: str, durability: str, exc: BaseException, tmp_path: Path
) -> None:
    def patch(m: Any) -> None:
        if at == "second_part":  # the first part's build and stash succeeded
            m.setattr(
                append_state.LogTree, "build", _raising_at(2, append_state.LogTree.build, exc)
            )
        else:
            m.setattr(recorder_module, at, _raising_at(1, getattr(recorder_module, at), exc))

    _run(tmp_path, kind, durability, patch)
